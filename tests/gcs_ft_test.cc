// GCS fault tolerance with Redis, end to end: a real redis-server (tests/redis_server.h) and real
// `troupe` processes. The head supervisor restarts a killed GCS, which finds the cluster's state
// in Redis; raylets re-attach with their node IDs; a whole head killed and started again is the
// same cluster with the same token; a wrong Redis password or Redis gone for good fail clearly.
// Like actors_test, this binary is also the worker program (for the actor checks).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "src/common/ids.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "src/rpc/gcs_client.h"
#include "src/schema/kv_schema.h"
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
int Square(int x) { return x * x; }
TROUPE_REMOTE(Counter::Create, &Counter::Add, Square);

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

// Whether `pid` runs (a zombie, dead but not yet reaped, does not).
bool Running(int pid) {
  if (!Alive(pid)) return false;
  const std::string stat = ReadText(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

// Whether every thread of `pid` is stopped (SIGSTOP takes effect asynchronously, per thread).
bool Stopped(int pid) {
  const std::string tasks = absl::StrCat("/proc/", pid, "/task");
  bool any = false;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(tasks, error)) {
    const std::string stat = ReadText(entry.path().string() + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
    if (stat[paren + 2] != 'T' && stat[paren + 2] != 't') return false;
    any = true;
  }
  return any;
}

// SIGSTOPs `pid` and waits until it is stopped.
void Freeze(int pid) {
  ASSERT_EQ(kill(pid, SIGSTOP), 0);
  ASSERT_TRUE(WaitUntil([&] { return Stopped(pid); }, absl::Seconds(5), "the process to stop"));
}

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

  // (The GCS dies with its supervisor.)
  const int gcs_pid = PidOf(session, "gcs");
  ASSERT_TRUE(Alive(gcs_pid));
  for (const char* name : {"head-supervisor", "raylet"}) {
    const int pid = PidOf(session, name);
    ASSERT_TRUE(Alive(pid)) << name;
    ASSERT_EQ(kill(pid, SIGKILL), 0) << name;
    EXPECT_TRUE(WaitUntil([&] { return !Alive(pid); }, absl::Seconds(5), name));
  }
  EXPECT_TRUE(WaitUntil([&] { return !Alive(gcs_pid); }, absl::Seconds(5), "the GCS"));
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
  // The old head node is not ALIVE for long: absent (a GCS that does not reload nodes) or
  // declared DEAD by the health checks (one that does).
  EXPECT_TRUE(WaitUntil(
      [&] {
        status = cluster.Status();
        auto alive = NodesIn(status, "ALIVE");
        return std::find(alive.begin(), alive.end(), old_head) == alive.end();
      },
      absl::Seconds(10), "the old head node not ALIVE", absl::Milliseconds(200)))
      << status.dump(2);
}

// Ray-style GCS fault tolerance in the middle of a workload: a detached named actor with a
// restart budget, ordered calls, tasks, a placement group and a running job. The GCS is
// SIGKILLed and kept down a while (its supervisor held with SIGSTOP); meanwhile calls to the
// live actor are answered (they go straight to its worker) and tasks wait. Once it is back:
// the actor is found by name and its calls continue in order, its restart policy still works,
// the placement group is still placed (and reserved once: the fixture's "nothing leaked" check
// after removing it would catch a second reservation), the job finishes with its whole log, job
// IDs are not reused, running drivers are still RUNNING and the task counters are still there.
TEST(GcsFtTest, WorkloadKeepsGoingThroughAGcsRestart) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(
      TestCluster cluster,
      TestCluster::Start({"--num-cpus=2", "--redis-address=" + redis->address(),
                          absl::StrCat("--http-port=", troupe::testing::PickFreePort())}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));
  auto job = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "job");
    args.insert(args.begin() + 2, "--address=" + cluster.HttpAddress());
    args.insert(args.begin() + 3, "--token=" + cluster.token());
    return RunTroupe(args);
  };
  CommandResult submitted = job({"submit", "--no-wait", "--submission-id=through", "--", "sh",
                                 "-c", "echo before-the-outage; sleep 4; echo after-the-outage"});
  ASSERT_EQ(submitted.exit_code, 0) << submitted.out << submitted.err;

  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create)
                     .SetName("survivor")
                     .SetLifetime(troupe::Detached{})
                     .SetMaxRestarts(1)
                     .SetMaxTaskRetries(1)
                     .Remote(40);
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Add).Remote(1)), 41);
  auto group = troupe::CreatePlacementGroup({"kept", {{{"CPU", 1}}}});
  ASSERT_TRUE(group.Wait(std::chrono::seconds(10)));
  std::vector<troupe::ObjectRef<int>> squares;
  for (int i = 0; i < 20; ++i) squares.push_back(troupe::Task(Square).Remote(i));
  for (int i = 0; i < 20; ++i) EXPECT_EQ(*troupe::Get(squares[i]), i * i);

  ASSERT_OK_AND_ASSIGN(std::vector<troupe::rpc::JobInfo> jobs_before, cluster.gcs().GetAllJobInfo());
  std::set<std::string> job_ids_before, running_before;
  for (const auto& j : jobs_before) {
    job_ids_before.insert(j.job_id());
    if (j.state() == troupe::rpc::JobInfo::RUNNING) running_before.insert(j.job_id());
  }
  EXPECT_GE(running_before.size(), 1u) << "this test's driver is a running job";
  absl::SleepFor(absl::Milliseconds(2500));  // one round of task counter reports
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> counters_before,
                       cluster.gcs().KVKeys(troupe::kTaskCountersNamespace, ""));
  EXPECT_FALSE(counters_before.empty());

  // The outage: GCS dead, not restarted until the supervisor runs again.
  const int supervisor = PidOf(cluster.HeadSessionDir(), "head-supervisor");
  ASSERT_TRUE(Alive(supervisor));
  ASSERT_EQ(kill(supervisor, SIGSTOP), 0);
  const int gcs_pid = cluster.GcsPid();
  ASSERT_EQ(kill(gcs_pid, SIGKILL), 0);
  int expected = 41;
  for (int i = 0; i < 20; ++i) {  // direct calls to the live actor keep flowing
    EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Add).Remote(1), std::chrono::seconds(10)),
              ++expected);
  }
  std::vector<troupe::ObjectRef<int>> during;
  for (int i = 0; i < 10; ++i) during.push_back(troupe::Task(Square).Remote(i));
  EXPECT_TRUE(Alive(PidOf(cluster.HeadSessionDir(), "raylet")));
  ASSERT_EQ(kill(supervisor, SIGCONT), 0);
  ASSERT_OK(TimeUntilAnswering(cluster.gcs_address(), cluster.token(), absl::Now(),
                               absl::Seconds(10), gcs_pid)
                .status());
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(*troupe::Get(during[i], std::chrono::seconds(30)), i * i);
  }

  // The actor: found by name, calls continue in order.
  auto found = troupe::GetActor<Counter>("survivor");
  ASSERT_TRUE(found.has_value()) << "the named actor must be reloaded from Redis";
  EXPECT_EQ(*troupe::Get(found->Task(&Counter::Add).Remote(1), std::chrono::seconds(10)),
            ++expected);
  // Its restart policy: one restart left; its worker killed, it comes back (state reset).
  int actor_pid = 0;
  ASSERT_OK_AND_ASSIGN(std::vector<troupe::rpc::ActorInfo> actors, cluster.gcs().GetAllActorInfo());
  for (const auto& a : actors) {
    if (a.name() == "survivor") actor_pid = a.pid();
  }
  ASSERT_GT(actor_pid, 0);
  ASSERT_EQ(kill(actor_pid, SIGKILL), 0);
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto all = cluster.gcs().GetAllActorInfo();
        if (!all.ok()) return false;
        for (const auto& a : *all) {
          if (a.name() == "survivor" && a.state() == troupe::rpc::ActorInfo::ALIVE &&
              a.num_restarts() == 1) {
            return true;
          }
        }
        return false;
      },
      absl::Seconds(20), "the actor to restart after the GCS restart"));
  // (Through the creating handle, which resends a call that reached the dead incarnation.)
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Add).Remote(1), std::chrono::seconds(10)), 41);

  // The placement group is still placed.
  ASSERT_OK_AND_ASSIGN(auto groups, cluster.gcs().GetAllPlacementGroups());
  bool kept = false;
  for (const auto& g : groups) {
    kept |= g.name() == "kept" && g.state() == troupe::rpc::PlacementGroupInfo::CREATED;
  }
  EXPECT_TRUE(kept) << "the placement group must be reloaded from Redis";

  // The job ran through the outage; its record and whole log are kept.
  EXPECT_TRUE(WaitUntil(
      [&] {
        return absl::StrContains(job({"status", "through"}).out, "SUCCEEDED");
      },
      absl::Seconds(30), "the job to succeed"));
  CommandResult logs = job({"logs", "through"});
  EXPECT_TRUE(absl::StrContains(logs.out, "before-the-outage")) << logs.out << logs.err;
  EXPECT_TRUE(absl::StrContains(logs.out, "after-the-outage")) << logs.out << logs.err;

  // Job IDs continue (a new driver gets a new one); running drivers are still running.
  CommandResult second = job({"submit", "--submission-id=after", "--", "true"});
  EXPECT_EQ(second.exit_code, 0) << second.out << second.err;
  ASSERT_OK_AND_ASSIGN(std::vector<troupe::rpc::JobInfo> jobs_after, cluster.gcs().GetAllJobInfo());
  size_t new_jobs = 0;
  for (const auto& j : jobs_after) {
    if (job_ids_before.count(j.job_id()) == 0) ++new_jobs;
    if (running_before.count(j.job_id()) > 0) {
      EXPECT_EQ(j.state(), troupe::rpc::JobInfo::RUNNING) << troupe::BytesToHex(j.job_id());
    }
  }
  EXPECT_GE(jobs_after.size(), job_ids_before.size());
  for (const auto& id : job_ids_before) {
    bool still = false;
    for (const auto& j : jobs_after) still |= j.job_id() == id;
    EXPECT_TRUE(still) << "job " << troupe::BytesToHex(id) << " was lost";
  }
  // The task counters behind /metrics.
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> counters_after,
                       cluster.gcs().KVKeys(troupe::kTaskCountersNamespace, ""));
  for (const auto& key : counters_before) {
    EXPECT_NE(std::find(counters_after.begin(), counters_after.end(), key), counters_after.end())
        << key;
  }

  found->Kill();
  troupe::RemovePlacementGroup(group);
}

// Redis itself killed and restarted while the cluster runs: the GCS keeps serving reads from
// memory, refuses KV writes it cannot save, takes them again once Redis is back, and what it
// acknowledged is in Redis, so a GCS killed after that still has it.
TEST(GcsFtTest, RedisRestartLosesNothing) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address()}));
  ASSERT_OK(cluster.gcs().KVPut("ft", "before", "one", true).status());
  ASSERT_OK(redis->Kill());
  ASSERT_OK_AND_ASSIGN(std::optional<std::string> read, cluster.gcs().KVGet("ft", "before"));
  EXPECT_EQ(read, std::optional<std::string>("one"));
  // A KV write cannot be acknowledged while Redis is away: UNAVAILABLE, saying why (never an
  // OK for a write that a GCS death could still lose).
  absl::StatusOr<bool> during = cluster.gcs().KVPut("ft", "while-redis-was-down", "two", true);
  EXPECT_TRUE(absl::IsUnavailable(during.status())) << during.status();
  EXPECT_TRUE(absl::StrContains(during.status().message(), "Redis at " + redis->address()))
      << during.status();
  ASSERT_OK(redis->Restart());
  // Once Redis is back the write goes through (the GCS reconnects within about a second).
  EXPECT_TRUE(WaitUntil(
      [&] { return cluster.gcs().KVPut("ft", "while-redis-was-down", "two", true).ok(); },
      absl::Seconds(10), "a KV write to succeed once Redis is back", absl::Milliseconds(100)));
  ASSERT_OK_AND_ASSIGN(troupe::rpc::GetClusterInfoReply info, cluster.gcs().GetClusterInfo());
  const std::string table = "troupe:" + troupe::BytesToHex(info.cluster_id()) + ":KV";
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto fields = redis->Command({"HKEYS", table});
        if (!fields.ok()) return false;
        for (const auto& f : *fields) {
          if (absl::StrContains(f, "while-redis-was-down")) return true;
        }
        return false;
      },
      absl::Seconds(10), "the queued write to reach the restarted Redis"));
  const int gcs_pid = cluster.GcsPid();
  ASSERT_EQ(kill(gcs_pid, SIGKILL), 0);
  ASSERT_OK(TimeUntilAnswering(cluster.gcs_address(), cluster.token(), absl::Now(),
                               absl::Seconds(10), gcs_pid)
                .status());
  GcsClient gcs(cluster.gcs_address(), cluster.token());
  ASSERT_OK_AND_ASSIGN(read, gcs.KVGet("ft", "while-redis-was-down"));
  EXPECT_EQ(read, std::optional<std::string>("two"));
}

// The GCS dies with its supervisor: a supervisor SIGKILLed (after it restarted the GCS once)
// takes the GCS and the HTTP server along, so with the head's raylet killed too `troupe start
// --head` on the same ports restarts the cluster at once (its HTTP server does not pick the old
// head node, dead but still listed ALIVE for a few seconds).
TEST(GcsFtTest, KilledSupervisorTakesItsGcsAlong) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  const std::string http_port = absl::StrCat(troupe::testing::PickFreePort());
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address(),
                                           "--http-port=" + http_port}));
  const std::string session = cluster.HeadSessionDir();
  const int first = cluster.GcsPid();
  ASSERT_EQ(kill(first, SIGKILL), 0);
  ASSERT_OK(TimeUntilAnswering(cluster.gcs_address(), cluster.token(), absl::Now(),
                               absl::Seconds(10), first)
                .status());
  const int restarted = cluster.GcsPid();
  ASSERT_NE(restarted, first);
  ASSERT_TRUE(Running(restarted));
  const int http = PidOf(session, "http");
  ASSERT_TRUE(Running(http));
  for (const char* name : {"head-supervisor", "raylet"}) {
    ASSERT_EQ(kill(PidOf(session, name), SIGKILL), 0) << name;
  }
  EXPECT_TRUE(WaitUntil([&] { return !Running(restarted) && !Running(http); }, absl::Seconds(10),
                        "the GCS and the HTTP server to die with their supervisor"));
  const std::string port = cluster.gcs_address().substr(cluster.gcs_address().rfind(':') + 1);
  CommandResult again =
      cluster.Troupe({"start", "--head", "--port=" + port, "--http-port=" + http_port,
                      "--num-cpus=1", "--redis-address=" + redis->address()});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_TRUE(absl::StrContains(again.out, "Restarted the head node")) << again.out;
}

// A hung GCS (SIGSTOP: the kernel still accepts connections, nothing answers) misses the
// supervisor's health checks, is killed and restarted with its state; a driver's named-actor
// lookup made during the hang waits and finds the actor.
TEST(GcsFtTest, HungGcsIsKilledAndRestarted) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address()}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create)
                     .SetName("through-the-hang")
                     .SetLifetime(troupe::Detached{})
                     .Remote(1);
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Add).Remote(1)), 2);

  const int hung = cluster.GcsPid();
  Freeze(hung);
  const absl::Time stopped = absl::Now();
  std::optional<troupe::ActorHandle<Counter>> found;
  std::string error;
  std::thread lookup([&] {
    try {
      found = troupe::GetActor<Counter>("through-the-hang");
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  const bool killed = WaitUntil([&] { return !Alive(hung); }, absl::Seconds(30),
                                "the supervisor to kill the hung GCS");
  EXPECT_TRUE(killed);
  if (!killed) kill(hung, SIGCONT);  // let the lookup finish either way
  ASSERT_OK_AND_ASSIGN(
      absl::Duration took,
      TimeUntilAnswering(cluster.gcs_address(), cluster.token(), stopped, absl::Seconds(15), hung));
  std::printf("hung GCS: a new GCS answered %.1f s after the SIGSTOP\n",
              absl::ToDoubleSeconds(took));
  lookup.join();
  EXPECT_TRUE(error.empty()) << "the lookup must wait for the restarted GCS: " << error;
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*troupe::Get(found->Task(&Counter::Add).Remote(1), std::chrono::seconds(10)), 3);
  EXPECT_NE(cluster.GcsPid(), hung);
  const std::string log = ReadText(cluster.HeadSessionDir() + "/logs/head-supervisor.log");
  EXPECT_TRUE(absl::StrContains(log, "it is hung; killing it")) << log;
  EXPECT_TRUE(absl::StrContains(log, "was hung and killed by this supervisor; restarted it"))
      << log;
  found->Kill();
}

// With the GCS and its supervisor both hung nothing answers: a driver's named-actor lookup
// waits out the reconnect limit and fails with ClusterUnreachableError (not GetTimeoutError),
// and `troupe status` says the GCS does not answer (not that it is being restarted).
TEST(GcsFtTest, HungHeadEndsDriverCallsWithClusterUnreachable) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address()}));
  setenv("TROUPE_GCS_RECONNECT_TIMEOUT_S", "4", 1);
  {
    Driver driver(cluster);
    unsetenv("TROUPE_GCS_RECONNECT_TIMEOUT_S");
    const int supervisor = PidOf(cluster.HeadSessionDir(), "head-supervisor");
    const int gcs = cluster.GcsPid();
    Freeze(supervisor);
    Freeze(gcs);
    std::string caught;
    try {
      (void)troupe::GetActor<Counter>("nobody");
      caught = "no exception";
    } catch (const troupe::ClusterUnreachableError& e) {
      std::printf("lookup on a hung head: %s\n", e.what());
    } catch (const std::exception& e) {
      caught = e.what();
    }
    EXPECT_TRUE(caught.empty()) << "expected ClusterUnreachableError, got: " << caught;
    CommandResult status = cluster.Troupe({"status"});
    EXPECT_EQ(status.exit_code, 1);
    EXPECT_TRUE(absl::StrContains(status.err, "accepts connections but does not answer"))
        << status.err;
    EXPECT_TRUE(absl::StrContains(status.err, "hung")) << status.err;
    EXPECT_FALSE(absl::StrContains(status.err, "being restarted")) << status.err;
    ASSERT_EQ(kill(gcs, SIGCONT), 0);
    ASSERT_EQ(kill(supervisor, SIGCONT), 0);
  }
}

// A job submission is acknowledged (200) only once its record is durable in Redis. Jobs are
// submitted while Redis hangs (SIGSTOP); then the GCS is killed before Redis comes back, so
// whatever it held only in memory is gone. After Redis and the GCS are back every 200 is there,
// and the others got 503 saying why.
TEST(GcsFtTest, JobSubmissionsAreAcknowledgedOnlyOnceDurable) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(
      TestCluster cluster,
      TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address(),
                          absl::StrCat("--http-port=", troupe::testing::PickFreePort())}));
  const httplib::Headers auth = {{"Authorization", "Bearer " + cluster.token()}};
  auto client = [&] {
    auto c = std::make_unique<httplib::Client>(cluster.HttpAddress());
    c->set_read_timeout(30, 0);
    return c;
  };
  std::vector<std::string> refusals;
  auto submit = [&](const std::string& id) {
    const std::string body = nlohmann::json{{"entrypoint", "true"}, {"submission_id", id}}.dump();
    auto reply = client()->Post("/api/jobs/", auth, body, "application/json");
    if (!reply) return -1;
    if (reply->status == 503) refusals.push_back(reply->body);
    return reply->status;
  };
  std::vector<std::pair<std::string, int>> answers;
  for (int i = 0; i < 2; ++i) {
    const std::string id = absl::StrCat("before-", i);
    answers.emplace_back(id, submit(id));
    EXPECT_EQ(answers.back().second, 200) << id;
  }
  ASSERT_OK(redis->Pause());
  for (int i = 0; i < 6; ++i) {
    const std::string id = absl::StrCat("during-", i);
    answers.emplace_back(id, submit(id));
  }
  // The GCS goes down before Redis is back (its supervisor held so it does not restart it
  // against the hung Redis): what it had not saved is lost.
  const int supervisor = PidOf(cluster.HeadSessionDir(), "head-supervisor");
  ASSERT_EQ(kill(supervisor, SIGSTOP), 0);
  const int gcs = cluster.GcsPid();
  ASSERT_EQ(kill(gcs, SIGKILL), 0);
  ASSERT_OK(redis->Resume());
  ASSERT_EQ(kill(supervisor, SIGCONT), 0);
  ASSERT_OK(TimeUntilAnswering(cluster.gcs_address(), cluster.token(), absl::Now(),
                               absl::Seconds(15), gcs)
                .status());
  auto found = [&](const std::string& id) {
    auto reply = client()->Get(("/api/jobs/" + id).c_str(), auth);
    return reply && reply->status == 200;
  };
  ASSERT_TRUE(WaitUntil([&] { return found("before-0"); }, absl::Seconds(20),
                        "the HTTP server to read jobs again", absl::Milliseconds(200)));
  int acknowledged = 0, refused = 0;
  for (const auto& [id, code] : answers) {
    if (code == 200) {
      ++acknowledged;
      EXPECT_TRUE(found(id)) << "job " << id << " was acknowledged with 200 and then lost";
    } else {
      ++refused;
      EXPECT_EQ(code, 503) << id;
    }
  }
  std::printf("job submissions: %d acknowledged, %d refused with 503\n", acknowledged, refused);
  EXPECT_GE(refused, 1) << "submissions while Redis hangs cannot all be durable";
  for (const auto& body : refusals) {
    EXPECT_TRUE(absl::StrContains(body, "was not submitted")) << body;
  }
}

// A Redis that lost the cluster (restarted empty, flushed): `troupe start --head` refuses to
// make a new cluster without a word, names the lost one, and starts a fresh one only when told.
// (`troupe stop` first stops the Redis head gracefully: supervisor, raylet, then the GCS.)
TEST(GcsFtTest, StartRefusesARedisThatLostTheCluster) {
  if (!RedisServer::Available()) GTEST_SKIP() << "no redis-server";
  auto redis = StartRedis();
  ASSERT_NE(redis, nullptr);
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--redis-address=" + redis->address()}));
  const std::string cluster_id = cluster.Status()["cluster_id"];
  const std::string session = cluster.HeadSessionDir();
  const std::string port = cluster.gcs_address().substr(cluster.gcs_address().rfind(':') + 1);
  CommandResult stopped = cluster.Troupe({"stop"});
  ASSERT_EQ(stopped.exit_code, 0) << stopped.out << stopped.err;
  EXPECT_TRUE(troupe::testing::ProcessesMentioning(cluster.temp_root()).empty());
  const std::string log = ReadText(session + "/logs/head-supervisor.log");
  EXPECT_TRUE(absl::StrContains(log, "is left for `troupe stop` to stop after the raylets")) << log;
  EXPECT_TRUE(absl::StrContains(log, "not restarting it (asked to stop)")) << log;

  ASSERT_OK(redis->Command({"FLUSHALL"}).status());
  const std::vector<std::string> start = {"start",          "--head",
                                          "--port=" + port, "--http-port=0",
                                          "--num-cpus=1",   "--redis-address=" + redis->address()};
  CommandResult lost = cluster.Troupe(start);
  EXPECT_EQ(lost.exit_code, 1) << lost.out;
  EXPECT_TRUE(absl::StrContains(lost.err, "holds no record of cluster " + cluster_id)) << lost.err;
  EXPECT_TRUE(absl::StrContains(lost.err, "--redis-start-fresh")) << lost.err;
  EXPECT_TRUE(troupe::testing::ProcessesMentioning(cluster.temp_root()).empty())
      << "nothing may start";

  std::vector<std::string> fresh_start = start;
  fresh_start.push_back("--redis-start-fresh");
  CommandResult fresh = cluster.Troupe(fresh_start);
  ASSERT_EQ(fresh.exit_code, 0) << fresh.out << fresh.err;
  EXPECT_TRUE(absl::StrContains(fresh.out, "Started a Troupe head node")) << fresh.out;
  EXPECT_FALSE(absl::StrContains(fresh.out, cluster_id)) << fresh.out;
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
