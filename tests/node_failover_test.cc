// Node failover and fencing on a real cluster: a worker node is frozen (its raylet and every
// worker it started get SIGSTOP), which to the rest of the cluster looks exactly like a network
// partition: health checks time out and the GCS declares the node dead, while no connection is
// ever reset. Checks that
//   - a task running there with retries left runs again elsewhere, and its Get returns;
//   - a max_retries=0 task running there fails with a typed error (TaskFailedError);
//   - a call in flight to an actor there fails with ActorDiedError (max_restarts=0);
// and then, once the node is thawed (the partition heals; its workers finish and answer):
//   - their late results are refused: the retried value and the errors stand;
//   - the node's raylet does not rejoin: the GCS tells it it is dead, it logs that, kills its
//     workers and exits; nothing leaks (every alive node's resources are free at the end).
// Prints "failover: ... s from freeze to Get" (a figure, not asserted).
// This binary is also the worker program (main() hands over to troupe::Init in worker mode).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

using troupe::testing::CommandLineOf;
using troupe::testing::Driver;
using troupe::testing::FindNode;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;

// How long the first attempt of a task "runs". Time frozen counts (the sleep is against the
// monotonic clock), so a thawed worker answers at once: the late reply the driver must refuse.
constexpr int kHoldMs = 8000;

// The first call with `marker` creates the file and holds for kHoldMs, returning 1 (the answer
// that must be refused); later calls (retries) return 2 at once.
int64_t HoldOnce(std::string marker) {
  const int fd = open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return 2;
  const std::string who = absl::StrCat(getpid(), " ", getppid());  // this worker, its raylet
  (void)!write(fd, who.data(), who.size());
  close(fd);
  std::this_thread::sleep_for(std::chrono::milliseconds(kHoldMs));
  return 1;
}

class Holder {
 public:
  static Holder* Create() { return new Holder(); }
  int64_t Hold(std::string marker) { return HoldOnce(std::move(marker)); }
};

TROUPE_REMOTE(HoldOnce, Holder::Create, &Holder::Hold);

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Pids of the processes whose parent is `parent` (the workers a raylet started).
std::vector<int> ChildrenOf(int parent) {
  std::vector<int> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    // "pid (comm) state ppid ...": comm may hold spaces, so read after the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    int ppid = 0;
    if (rest >> state >> ppid && ppid == parent) children.push_back(pid);
  }
  closedir(proc);
  return children;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(NodeFailoverTest, FrozenNodeFailsOverAndIsFencedWhenItComesBack) {
  // The head runs nothing: the tasks go to the doomed node, the only one with CPUs at first.
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=0"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed, cluster.AddWorker({"--num-cpus=4"}));
  const int raylet_pid = FindNode(cluster.Status(), doomed)["raylet_pid"];
  const std::string retried_marker = cluster.temp_root() + "/retried";
  const std::string failed_marker = cluster.temp_root() + "/failed";
  const std::string actor_marker = cluster.temp_root() + "/actor";
  std::vector<int> frozen;
  {
    Driver driver(cluster);
    auto retried = troupe::Task(HoldOnce).SetMaxRetries(1).Remote(retried_marker);
    auto failed = troupe::Task(HoldOnce).SetMaxRetries(0).Remote(failed_marker);
    auto actor = troupe::Actor(Holder::Create)
                     .SetSchedulingStrategy(troupe::NodeAffinity{doomed, /*soft=*/false})
                     .SetMaxRestarts(0)
                     .Remote();
    auto call = actor.Task(&Holder::Hold).Remote(actor_marker);
    ASSERT_TRUE(WaitUntil(
        [&] { return Exists(retried_marker) && Exists(failed_marker) && Exists(actor_marker); },
        absl::Seconds(30), "all three to be running on the doomed node"));
    const absl::Time holding_since = absl::Now();
    // Where the retry will run.
    ASSERT_OK(cluster.AddWorker({"--num-cpus=2"}));

    // Freeze the node: to everyone else it is now partitioned away.
    frozen = ChildrenOf(raylet_pid);
    ASSERT_GE(frozen.size(), 3u) << "the node's workers; (pid, raylet pid) of the three: "
                                 << ReadFile(retried_marker) << ", " << ReadFile(failed_marker)
                                 << ", " << ReadFile(actor_marker) << "; doomed raylet "
                                 << raylet_pid;
    ASSERT_EQ(kill(raylet_pid, SIGSTOP), 0);
    for (int pid : frozen) kill(pid, SIGSTOP);
    const absl::Time froze = absl::Now();

    EXPECT_EQ(*troupe::Get(retried, std::chrono::seconds(60)), 2);  // the retry's value
    const absl::Duration failover = absl::Now() - froze;
    std::cout << "failover: " << absl::ToDoubleSeconds(failover)
              << " s from freeze to Get (retried task)\n";
    try {
      troupe::Get(failed, std::chrono::seconds(60));
      ADD_FAILURE() << "the max_retries=0 task on the dead node returned a value";
    } catch (const troupe::TaskFailedError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "declared dead")) << e.what();
    }
    EXPECT_THROW(troupe::Get(call, std::chrono::seconds(60)), troupe::ActorDiedError);
    EXPECT_EQ(FindNode(cluster.Status(), doomed)["state"], "DEAD");

    // The partition heals: the workers first, and their raylet only once they have answered
    // (1, sent as soon as their hold is over), so the answers reach the driver before the
    // raylet learns it is dead and kills them.
    for (int pid : frozen) kill(pid, SIGCONT);
    absl::SleepFor(holding_since + absl::Milliseconds(kHoldMs + 1000) - absl::Now());
    ASSERT_EQ(kill(raylet_pid, SIGCONT), 0);
    EXPECT_TRUE(WaitUntil([&] { return CommandLineOf(raylet_pid).empty(); }, absl::Seconds(20),
                          "the dead node's raylet to exit"));

    // Refused: nothing the thawed node said changed what the driver had.
    EXPECT_EQ(*troupe::Get(retried, std::chrono::seconds(5)), 2);
    EXPECT_THROW(troupe::Get(failed, std::chrono::seconds(5)), troupe::TaskFailedError);
    EXPECT_THROW(troupe::Get(call, std::chrono::seconds(5)), troupe::ActorDiedError);
    // The cluster still works (on the spare node).
    EXPECT_EQ(*troupe::Get(troupe::Task(HoldOnce).Remote(retried_marker), std::chrono::seconds(30)),
              2);
  }
  for (int pid : frozen) {
    EXPECT_TRUE(WaitUntil([&] { return CommandLineOf(pid).empty(); }, absl::Seconds(10),
                          "the dead node's workers to be gone"))
        << "pid " << pid;
  }
  // It did not rejoin, and said why.
  EXPECT_EQ(FindNode(cluster.Status(), doomed)["state"], "DEAD");
  bool logged = false;
  for (const auto& log : cluster.RayletLogs()) {
    logged |= absl::StrContains(ReadFile(log), "declared this node");
  }
  EXPECT_TRUE(logged) << "no raylet log says the node was declared dead";
  // ~TestCluster checks that every alive node's resources are all available again.
}

}  // namespace

int main(int argc, char** argv) {
  // In worker mode this never returns: the raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
