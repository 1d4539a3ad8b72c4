// GCS fault tolerance with Redis, end to end: a real redis-server (tests/redis_server.h) and real
// `troupe` processes. The head supervisor restarts a killed GCS, which finds the cluster's state
// in Redis; raylets re-attach with their node IDs; a whole head killed and started again is the
// same cluster with the same token; a wrong Redis password or Redis gone for good fail clearly.
// Like actors_test, this binary is also the worker program (for the actor checks).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/common/ids.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/rpc/gcs_client.h"
#include "tests/driver.h"
#include "tests/redis_server.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

class Counter {
 public:
  explicit Counter(int start) : value_(start) {}
  static Counter* Create(int start) { return new Counter(start); }
  int Add(int x) { return value_ += x; }

 private:
  int value_;
};
TROUPE_REMOTE(Counter::Create, &Counter::Add);

using troupe::GcsClient;
using troupe::testing::CommandResult;
using troupe::testing::Driver;
using troupe::testing::FindNode;
using troupe::testing::RedisServer;
using troupe::testing::RunTroupe;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int PidOf(const std::string& session_dir, const std::string& name) {
  int pid = 0;
  std::string text(absl::StripAsciiWhitespace(ReadText(session_dir + "/pids/" + name + ".pid")));
  return absl::SimpleAtoi(text, &pid) ? pid : 0;
}

bool Alive(int pid) { return pid > 0 && kill(pid, 0) == 0; }

std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::ofstream(path) << content;
  return path;
}

// Node IDs (hex) of ALIVE / DEAD nodes in `troupe status --format=json`.
std::vector<std::string> NodesIn(const nlohmann::json& status, const std::string& state) {
  std::vector<std::string> ids;
  if (!status.contains("nodes")) return ids;
  for (const auto& node : status["nodes"]) {
    if (node["state"] == state) ids.push_back(node["node_id"]);
  }
  return ids;
}

// Waits until a GCS answers at `address` with `token` (fresh clients: a channel that saw
// "refused" backs off); returns how long that took, or an error after `timeout`.
absl::StatusOr<absl::Duration> TimeUntilAnswering(const std::string& address,
                                                  const std::string& token, absl::Time since,
                                                  absl::Duration timeout, int not_pid) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    GcsClient gcs(address, token, absl::Milliseconds(300));
    if (gcs.GetClusterInfo().ok()) return absl::Now() - since;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::DeadlineExceededError(absl::StrCat("no GCS answered at ", address, " within ",
                                                  absl::FormatDuration(timeout), " (pid ",
                                                  not_pid, " was killed)"));
}

std::unique_ptr<RedisServer> StartRedis(RedisServer::Options options = {}) {
  auto redis = RedisServer::Start(std::move(options));
  EXPECT_TRUE(redis.ok()) << redis.status();
  return redis.ok() ? *std::move(redis) : nullptr;
}

// SIGKILL the GCS: the supervisor restarts it, it answers within ~1 s with the state it had
// (KV), the raylets re-attach with the same node IDs, and no node is declared dead.
TEST(GcsFtTest, KilledGcsIsRestartedWithItsStateAndNodes) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address()}));
  ASSERT_OK_AND_ASSIGN(std::string worker, cluster.AddWorker({"--num-cpus=1"}));
  const std::vector<std::string> nodes = NodesIn(cluster.Status(), "ALIVE");
  ASSERT_EQ(nodes.size(), 2u);
  ASSERT_OK_AND_ASSIGN(bool added, cluster.gcs().KVPut("ft", "before", "kept", true));
  EXPECT_TRUE(added);

  for (int round = 1; round <= 2; ++round) {
    const int gcs_pid = cluster.GcsPid();
    ASSERT_GT(gcs_pid, 0);
    ASSERT_EQ(kill(gcs_pid, SIGKILL), 0);
    const absl::Time killed = absl::Now();
    ASSERT_OK_AND_ASSIGN(absl::Duration took,
                         TimeUntilAnswering(cluster.gcs_address(), cluster.token(), killed,
                                            absl::Seconds(10), gcs_pid));
    std::printf("GCS restart %d: answering %.0f ms after SIGKILL\n", round,
                absl::ToDoubleMilliseconds(took));
    std::fflush(stdout);
    EXPECT_LT(took, absl::Seconds(5)) << "target: about 1 s";
    EXPECT_NE(cluster.GcsPid(), gcs_pid) << "pids/gcs.pid must name the new GCS";
    EXPECT_TRUE(Alive(cluster.GcsPid()));

    GcsClient gcs(cluster.gcs_address(), cluster.token(), absl::Seconds(5));
    ASSERT_OK_AND_ASSIGN(std::optional<std::string> value, gcs.KVGet("ft", "before"));
    EXPECT_EQ(value, std::optional<std::string>("kept"));
    // Both raylets re-attach with their node IDs.
    nlohmann::json status;
    EXPECT_TRUE(WaitUntil(
        [&] {
          status = cluster.Status();
          auto alive = NodesIn(status, "ALIVE");
          std::sort(alive.begin(), alive.end());
          auto expected = nodes;
          std::sort(expected.begin(), expected.end());
          return alive == expected;
        },
        absl::Seconds(10), "both nodes ALIVE again with their IDs", absl::Milliseconds(50)))
        << status.dump(2);
  }
  // And none is declared dead afterwards (health checks see the same raylets).
  absl::SleepFor(absl::Seconds(2));
  nlohmann::json status = cluster.Status();
  EXPECT_TRUE(NodesIn(status, "DEAD").empty()) << status.dump(2);
  EXPECT_EQ(NodesIn(status, "ALIVE").size(), 2u) << status.dump(2);
  const std::string log = ReadText(cluster.HeadSessionDir() + "/logs/head-supervisor.log");
  EXPECT_TRUE(absl::StrContains(log, "was killed by signal 9")) << log;
  EXPECT_TRUE(absl::StrContains(log, "restarted it")) << log;
}

// While the GCS is down (its supervisor held with SIGSTOP so it cannot restart it yet),
// `troupe status` says so, and a driver's KV write waits and succeeds once the GCS is back.
TEST(GcsFtTest, StatusAndDriversDuringAnOutage) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address()}));
  Driver driver(cluster);
  const std::string session = cluster.HeadSessionDir();
  const int supervisor = PidOf(session, "head-supervisor");
  ASSERT_TRUE(Alive(supervisor));
  ASSERT_EQ(kill(supervisor, SIGSTOP), 0);
  ASSERT_EQ(kill(cluster.GcsPid(), SIGKILL), 0);

  std::atomic<bool> put_done{false};
  bool put_result = false;
  std::string put_error;
  std::thread writer([&] {
    try {
      put_result = troupe::internal::RequireRuntime().KvPut("ft", "during", "outage", true);
    } catch (const std::exception& e) {
      put_error = e.what();
    }
    put_done = true;
  });
  CommandResult result = cluster.Troupe({"status"});
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(result.err, "is unreachable")) << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, "being restarted by the head supervisor"))
      << result.err;
  EXPECT_TRUE(absl::StrContains(result.err, redis->address())) << result.err;
  EXPECT_FALSE(put_done.load()) << "the driver's call must wait for the GCS: " << put_error;

  ASSERT_EQ(kill(supervisor, SIGCONT), 0);
  writer.join();
  EXPECT_TRUE(put_error.empty()) << put_error;
  EXPECT_TRUE(put_result);
  GcsClient gcs(cluster.gcs_address(), cluster.token(), absl::Seconds(5));
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> value, gcs.KVGet("ft", "during"));
  EXPECT_EQ(value, std::optional<std::string>("outage"));
  result = cluster.Troupe({"status"});
  EXPECT_EQ(result.exit_code, 0) << result.err;
}

TEST(GcsFtTest, WrongRedisPasswordFailsStartAtOnce) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis({.password = "s3cret"});
  ASSERT_NE(redis, nullptr);
  const std::string wrong = WriteFile("wrong_password", "nope\n");
  absl::StatusOr<TestCluster> bad = TestCluster::Start(
      {"--redis-address=" + redis->address(), "--redis-password-file=" + wrong});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "Redis at " + redis->address()))
      << bad.status();
  EXPECT_FALSE(absl::StrContains(bad.status().message(), "nope")) << "never echo a password";

  // Nothing listens at the address: also at once, saying so.
  absl::StatusOr<TestCluster> nowhere = TestCluster::Start(
      {absl::StrCat("--redis-address=127.0.0.1:", troupe::testing::PickFreePort())});
  ASSERT_FALSE(nowhere.ok());
  EXPECT_TRUE(absl::StrContains(nowhere.status().message(), "cannot use Redis at"))
      << nowhere.status();

  const std::string right = WriteFile("right_password", "s3cret\n");
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address(),
                                           "--redis-password-file=" + right}));
  // The password is on no command line.
  for (int pid : troupe::testing::ProcessesMentioning(cluster.temp_root())) {
    for (const auto& arg : troupe::testing::CommandLineOf(pid)) {
      EXPECT_FALSE(absl::StrContains(arg, "s3cret")) << arg;
    }
  }
}

// Redis gone for good: the GCS exits, saying why, once --redis-give-up-s has passed; the
// supervisor does not restart it.
TEST(GcsFtTest, GcsExitsClearlyWhenRedisIsGoneForGood) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address(),
                                           "--redis-give-up-s=2"}));
  const std::string session = cluster.HeadSessionDir();
  const int gcs_pid = cluster.GcsPid();
  const int supervisor = PidOf(session, "head-supervisor");
  ASSERT_OK(redis->Kill());
  const absl::Time killed = absl::Now();
  // Writes keep coming (raylet reports write nothing, so write KV ourselves).
  GcsClient gcs(cluster.gcs_address(), cluster.token(), absl::Seconds(1));
  EXPECT_TRUE(WaitUntil(
      [&] {
        (void)gcs.KVPut("ft", "x", absl::StrCat(absl::ToUnixNanos(absl::Now())), true);
        return !Alive(gcs_pid);
      },
      absl::Seconds(20), "the GCS to exit", absl::Milliseconds(100)));
  std::printf("GCS exited %.1f s after Redis was killed (give-up 2 s)\n",
              absl::ToDoubleSeconds(absl::Now() - killed));
  const std::string gcs_log = ReadText(session + "/logs/gcs.log");
  EXPECT_TRUE(absl::StrContains(gcs_log, "is gone")) << gcs_log;
  EXPECT_TRUE(absl::StrContains(gcs_log, redis->address())) << gcs_log;
  EXPECT_TRUE(WaitUntil([&] { return !Alive(supervisor); }, absl::Seconds(5),
                        "the supervisor to exit"));
  const std::string supervisor_log = ReadText(session + "/logs/head-supervisor.log");
  EXPECT_TRUE(absl::StrContains(supervisor_log, "not restarting it")) << supervisor_log;
}

// Every head process SIGKILLed, then `troupe start --head` again with the same Redis and port:
// the same cluster (ID, token, KV), the worker re-attaches, the new head raylet is a new node.
TEST(GcsFtTest, WholeHeadRestartIsTheSameCluster) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address()}));
  ASSERT_OK_AND_ASSIGN(std::string worker, cluster.AddWorker({"--num-cpus=1"}));
  ASSERT_OK(cluster.gcs().KVPut("ft", "before", "kept", true).status());
  nlohmann::json before = cluster.Status();
  const std::string cluster_id = before["cluster_id"];
  std::string old_head;
  for (const auto& node : before["nodes"]) {
    if (node["is_head"]) old_head = node["node_id"];
  }
  const std::string session = cluster.HeadSessionDir();
  const std::string port = cluster.gcs_address().substr(cluster.gcs_address().rfind(':') + 1);

  // Another machine's temp root knows no token: refused, saying what to do.
  CommandResult unknown = RunTroupe(
      {"start", "--head", "--temp-dir=" + std::string(std::getenv("TEST_TMPDIR")) + "/elsewhere",
       absl::StrCat("--port=", troupe::testing::PickFreePort()), "--http-port=0",
       "--redis-address=" + redis->address()});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unknown.err, "holds cluster " + cluster_id)) << unknown.err;
  EXPECT_TRUE(absl::StrContains(unknown.err, "--token=")) << unknown.err;
  EXPECT_TRUE(absl::StrContains(unknown.err, "--redis-namespace=")) << unknown.err;

  for (const char* name : {"head-supervisor", "gcs", "raylet"}) {
    const int pid = PidOf(session, name);
    ASSERT_TRUE(Alive(pid)) << name;
    ASSERT_EQ(kill(pid, SIGKILL), 0) << name;
    EXPECT_TRUE(WaitUntil([&] { return !Alive(pid); }, absl::Seconds(5), name));
  }
  // A wrong token is refused.
  CommandResult wrong = cluster.Troupe(
      {"start", "--head", "--port=" + port, "--http-port=0", "--redis-address=" + redis->address(),
       "--token=troupe_" + cluster_id + "_" + std::string(64, 'a')});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(wrong.err, "is not its token")) << wrong.err;

  const absl::Time started = absl::Now();
  CommandResult again = cluster.Troupe({"start", "--head", "--port=" + port, "--http-port=0",
                                        "--num-cpus=1", "--redis-address=" + redis->address()});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  std::printf("whole-head restart: `troupe start --head` took %.0f ms\n",
              absl::ToDoubleMilliseconds(absl::Now() - started));
  EXPECT_TRUE(absl::StrContains(again.out, "Restarted the head node of Troupe cluster " +
                                               cluster_id))
      << again.out;
  EXPECT_NE(cluster.HeadSessionDir(), session);
  // The old token (the fixture's) still works, and the KV is there.
  GcsClient gcs(cluster.gcs_address(), cluster.token(), absl::Seconds(5));
  ASSERT_OK_AND_ASSIGN(auto info, gcs.GetClusterInfo());
  EXPECT_EQ(troupe::BytesToHex(info.cluster_id()), cluster_id);
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> value, gcs.KVGet("ft", "before"));
  EXPECT_EQ(value, std::optional<std::string>("kept"));
  // The worker re-attaches with its ID; the head is a new node.
  nlohmann::json status;
  EXPECT_TRUE(WaitUntil(
      [&] {
        status = cluster.Status();
        auto alive = NodesIn(status, "ALIVE");
        return alive.size() >= 2 &&
               std::find(alive.begin(), alive.end(), worker) != alive.end();
      },
      absl::Seconds(10), "the worker and the new head ALIVE", absl::Milliseconds(100)))
      << status.dump(2);
  std::string new_head;
  for (const auto& node : status["nodes"]) {
    if (node["is_head"] && node["state"] == "ALIVE") new_head = node["node_id"];
  }
  EXPECT_FALSE(new_head.empty()) << status.dump(2);
  EXPECT_NE(new_head, old_head);
}

// NEEDS wt-reload (the GCS managers reloading actors, placement groups and nodes from the store
// on start): a detached named actor and a placement group made before the GCS was killed are
// still there after the restart, and the old actor answers calls.
TEST(GcsFtTest, ActorsAndPlacementGroupsSurviveAGcsRestart) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=2", "--redis-address=" + redis->address()}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create)
                     .SetName("survivor")
                     .SetLifetime(troupe::Detached{})
                     .Remote(40);
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Add).Remote(1)), 41);
  auto group = troupe::CreatePlacementGroup({"kept", {{{"CPU", 1}}}});
  ASSERT_TRUE(group.Wait(std::chrono::seconds(10)));

  const int gcs_pid = cluster.GcsPid();
  ASSERT_EQ(kill(gcs_pid, SIGKILL), 0);
  ASSERT_OK(TimeUntilAnswering(cluster.gcs_address(), cluster.token(), absl::Now(),
                               absl::Seconds(10), gcs_pid)
                .status());
  auto found = troupe::GetActor<Counter>("survivor");
  ASSERT_TRUE(found.has_value()) << "the named actor must be reloaded from Redis";
  EXPECT_EQ(*troupe::Get(found->Task(&Counter::Add).Remote(1), std::chrono::seconds(10)), 42);
  ASSERT_OK_AND_ASSIGN(auto groups, cluster.gcs().GetAllPlacementGroups());
  bool kept = false;
  for (const auto& g : groups) kept |= g.name() == "kept" && g.state() == troupe::rpc::PlacementGroupInfo::CREATED;
  EXPECT_TRUE(kept) << "the placement group must be reloaded from Redis";
  found->Kill();
  troupe::RemovePlacementGroup(group);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
