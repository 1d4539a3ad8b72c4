// Chaos: a mixed workload runs on a real multi-node cluster while a killer SIGKILLs random worker
// processes and whole worker raylets (replacing each killed node with a fresh one), modelled on
// Ray's chaos release tests. The workload:
//   - dependency chains of tasks hopping between nodes (SPREAD), some carrying values too large
//     to travel inline, so a killed node takes intermediate results with it and the owner must
//     re-run their creating tasks (lineage reconstruction) or retry the tasks it lost;
//   - large objects made on one node and checksummed on another;
//   - ordered calls to restartable actors.
// At the end every result must be exact, every actor call answered in order, every node's
// resources back (available == total), no process left, and no object left in any node's
// shared-memory store or spill directory once the driver is gone.
//
// Two sizes from one program: `chaos_test` (the normal test run, well under two minutes) and
// `chaos_long_test` (tag "chaos", run with `bash scripts/chaos.sh`: 10,000 tasks, hundreds of
// large objects, thousands of actor calls). Each prints one summary line:
//   chaos summary: tasks=... kills=... (workers=... raylets=...) retries=... reconstructions=...
//   wall_with_kills=...s wall_without_kills=...s
// This binary is also the worker program (main() hands over to troupe::Init in worker mode).
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/schema.pb.h"
#include "src/common/session.h"
#include "src/common/status_testing.h"
#include "src/common/test_seed.h"
#include "src/common/wait_until.h"
#include "src/schema/kv_schema.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"

namespace {

using troupe::testing::Driver;
using troupe::testing::TestCluster;
using troupe::testing::TestRandom;
using troupe::testing::WaitUntil;

// ---- the workload's remote functions ----

// One step of a chain: a deterministic function of the previous value and the step number. The
// value's size is chosen by the chain: small ones travel inline in replies, large ones (over
// the 100 KiB inline limit) live in the store of the node that made them.
std::vector<uint64_t> Step(std::vector<uint64_t> previous, int64_t step) {
  uint64_t state = previous.empty() ? 0 : previous[0];
  for (auto& word : previous) {
    state = state * 6364136223846793005ull + 1442695040888963407ull + static_cast<uint64_t>(step);
    word ^= state;
  }
  return previous;
}

std::vector<uint64_t> Seed(int64_t chain, int64_t words) {
  std::vector<uint64_t> value(words);
  for (int64_t i = 0; i < words; ++i) value[i] = static_cast<uint64_t>(chain) * 1000003u + i;
  return value;
}

uint64_t Digest(const uint8_t* data, size_t size) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  return hash;
}

std::vector<uint8_t> MakeBytes(int64_t size, int64_t seed) {
  std::vector<uint8_t> bytes(size);
  uint64_t state = static_cast<uint64_t>(seed) * 2654435761u + 1;
  for (auto& b : bytes) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(state >> 56);
  }
  return bytes;
}

uint64_t DigestOf(std::vector<uint8_t> bytes) { return Digest(bytes.data(), bytes.size()); }

// Answers call i of one caller with i; counts calls that arrived out of order within this
// incarnation (a restarted actor starts from the caller's first unanswered call).
class Sequencer {
 public:
  static Sequencer* Create() { return new Sequencer(); }
  int64_t Next(int64_t i) {
    if (i <= last_) ++out_of_order_;
    last_ = i;
    return out_of_order_ == 0 ? i : -1;
  }

 private:
  int64_t last_ = -1;
  int64_t out_of_order_ = 0;
};

// Kills the raylet that started this worker, then keeps storing objects until that fails
// because the raylet is gone: the failure is the raylet's, not the task's, so it must not become
// the task's result (the worker exits unanswered and the task runs again elsewhere, where the
// marker file makes it return 42).
int64_t StoreWhileMyRayletDies(std::string marker) {
  const int fd = open(marker.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return 42;
  close(fd);
  // Outlive the raylet (no parent-death signal): the race the kernel usually wins, made certain.
  prctl(PR_SET_PDEATHSIG, 0);
  kill(getppid(), SIGKILL);
  const std::vector<uint8_t> bytes(256 << 10, 7);
  for (int i = 0; i < 200; ++i) troupe::Put(bytes);  // throws once the raylet is gone
  return -1;                                         // the raylet outlived 200 puts
}

// Dies (SIGKILL) while it holds its argument mapped: its store pin is released by the raylet.
int64_t DieWhileReading(std::vector<uint8_t> bytes) {
  kill(getpid(), SIGKILL);
  return static_cast<int64_t>(bytes.size());
}

TROUPE_REMOTE(Step, Seed, MakeBytes, DigestOf, Sequencer::Create, &Sequencer::Next,
              StoreWhileMyRayletDies, DieWhileReading);

// ---- sizes ----

struct Scale {
  int worker_nodes;
  int chains;
  int chain_length;
  int large_chain_every;  // every n-th chain carries large values (reconstructable on loss)
  int large_objects;
  int64_t large_object_bytes;
  int actors;
  int calls_per_actor;
  absl::Duration kill_period;
  int max_raylet_kills;
};

Scale ShortScale() {
  return {/*worker_nodes=*/3,
          /*chains=*/60,
          /*chain_length=*/10,
          /*large_chain_every=*/3,
          /*large_objects=*/30,
          /*large_object_bytes=*/1 << 20,
          /*actors=*/2,
          /*calls_per_actor=*/150,
          absl::Milliseconds(800),
          /*max_raylet_kills=*/2};
}

Scale LongScale() {
  return {/*worker_nodes=*/3,
          /*chains=*/1000,
          /*chain_length=*/10,
          /*large_chain_every=*/4,
          /*large_objects=*/300,
          /*large_object_bytes=*/1 << 20,
          /*actors=*/4,
          /*calls_per_actor=*/1000,
          absl::Milliseconds(2000),
          /*max_raylet_kills=*/8};
}

constexpr int64_t kSmallWords = 4;
constexpr int64_t kLargeWords = 16 * 1024;  // 128 KiB: over the inline limit

std::vector<uint64_t> ExpectedChain(int chain, int64_t words, int length) {
  std::vector<uint64_t> value = Seed(chain, words);
  for (int step = 0; step < length; ++step) value = Step(std::move(value), step);
  return value;
}

// ---- the killer ----

// Parent pid of `pid` from /proc/<pid>/stat (0 when it is gone).
int ParentOf(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> fields = absl::StrSplit(line.substr(close + 2), ' ');
  int parent = 0;
  if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &parent)) return 0;
  return parent;
}

std::vector<int> ChildrenOf(const std::set<int>& parents) {
  std::vector<int> children;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return children;
  while (dirent* entry = readdir(proc)) {
    int pid;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    if (parents.count(ParentOf(pid)) > 0) children.push_back(pid);
  }
  closedir(proc);
  return children;
}

struct KillCounts {
  int workers = 0;
  int raylets = 0;
};

// SIGKILLs, every `period`, either a random worker process of any node (children of the
// raylets) or — up to `max_raylet_kills` times — a random worker node's raylet, which takes its
// workers with it; a killed node is replaced by a fresh one with the same flags. Its thread and
// KillNodeNow (from the test's thread) take turns on `cluster` under a lock.
class Killer {
 public:
  Killer(TestCluster& cluster, std::vector<std::string> node_flags, Scale scale, uint32_t seed)
      : cluster_(cluster), node_flags_(std::move(node_flags)), scale_(scale), random_(seed) {}

  void Start() {
    thread_ = std::thread([this] {
      while (!stop_.WaitForNotificationWithTimeout(scale_.kill_period)) Round(/*force_node=*/false);
    });
  }
  ~Killer() { Stop(); }
  KillCounts Stop() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    if (thread_.joinable()) thread_.join();
    absl::MutexLock lock(&mu_);
    return counts_;
  }
  // Takes a worker node down now (and starts its replacement), whatever the schedule says.
  void KillNodeNow() { Round(/*force_node=*/true); }
  // Why a node could not be replaced, if it could not ("" otherwise).
  std::string error() {
    absl::MutexLock lock(&mu_);
    return error_;
  }

 private:
  void Round(bool force_node) {
    absl::MutexLock lock(&mu_);
    nlohmann::json status = cluster_.Status();
    std::set<int> raylets;
    std::vector<int> worker_raylets;
    for (const auto& node : status.value("nodes", nlohmann::json::array())) {
      if (node["state"] != "ALIVE") continue;
      const int pid = node["raylet_pid"];
      if (kill(pid, 0) != 0) continue;  // killed, not declared dead yet
      raylets.insert(pid);
      if (!node["is_head"].get<bool>()) worker_raylets.push_back(pid);
    }
    // The second round always takes a node down (so every run loses one); later rounds pick a
    // node one time in four.
    ++round_;
    const bool kill_node =
        !worker_raylets.empty() &&
        (force_node || (counts_.raylets < scale_.max_raylet_kills &&
                        (round_ == 2 || std::uniform_int_distribution<int>(0, 3)(random_) == 0)));
    if (kill_node) {
      const int pid = worker_raylets[random_() % worker_raylets.size()];
      if (kill(pid, SIGKILL) != 0) return;
      ++counts_.raylets;
      auto added = cluster_.AddWorker(node_flags_);
      if (!added.ok()) error_ = std::string(added.status().message());
      return;
    }
    std::vector<int> workers = ChildrenOf(raylets);
    if (workers.empty()) return;
    if (kill(workers[random_() % workers.size()], SIGKILL) == 0) ++counts_.workers;
  }

  TestCluster& cluster_;
  const std::vector<std::string> node_flags_;
  const Scale scale_;
  absl::Notification stop_;
  std::thread thread_;
  absl::Mutex mu_;
  std::mt19937 random_ ABSL_GUARDED_BY(mu_);
  KillCounts counts_ ABSL_GUARDED_BY(mu_);
  int round_ ABSL_GUARDED_BY(mu_) = 0;
  std::string error_ ABSL_GUARDED_BY(mu_);
};

// ---- one run of the workload ----

struct RunResult {
  absl::Duration wall;
  int tasks = 0;
  std::vector<std::string> errors;  // each wrong or failed result, said once
};

// Runs the workload once. With a `killer`, a node is also taken down after every chain has
// finished and before the results are read, so some results exist only on a dead node and must
// be rebuilt from lineage.
RunResult RunWorkload(const Scale& scale, Killer* killer) {
  RunResult result;
  const absl::Time start = absl::Now();

  // Ordered actor calls, made from their own thread while the tasks run.
  std::vector<troupe::ActorHandle<Sequencer>> actors;
  for (int a = 0; a < scale.actors; ++a) {
    actors.push_back(troupe::Actor(Sequencer::Create)
                         .SetMaxRestarts(-1)
                         .SetMaxTaskRetries(-1)
                         .SetSchedulingStrategy(troupe::Spread{})
                         .Remote());
  }
  std::vector<std::vector<troupe::ObjectRef<int64_t>>> calls(scale.actors);
  std::string caller_error;
  std::thread caller([&] {
    try {
      for (int i = 0; i < scale.calls_per_actor; ++i) {
        for (int a = 0; a < scale.actors; ++a) {
          calls[a].push_back(actors[a].Task(&Sequencer::Next).Remote(static_cast<int64_t>(i)));
        }
        if (i % 25 == 24) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // pacing
      }
    } catch (const std::exception& e) {
      caller_error = e.what();
    }
  });
  struct Joiner {
    std::thread& thread;
    ~Joiner() {
      if (thread.joinable()) thread.join();
    }
  } joiner{caller};

  // Chains: every step is a task with retries, placed by SPREAD, taking the previous step's
  // result by reference.
  std::vector<troupe::ObjectRef<std::vector<uint64_t>>> ends;
  for (int c = 0; c < scale.chains; ++c) {
    const int64_t words = c % scale.large_chain_every == 0 ? kLargeWords : kSmallWords;
    auto value = troupe::Task(Seed).SetMaxRetries(-1).Remote(static_cast<int64_t>(c), words);
    for (int step = 0; step < scale.chain_length; ++step) {
      value = troupe::Task(Step)
                  .SetMaxRetries(-1)
                  .SetSchedulingStrategy(troupe::Spread{})
                  .Remote(value, static_cast<int64_t>(step));
    }
    ends.push_back(value);
    result.tasks += 1 + scale.chain_length;
  }

  // Large objects made on one node and read on another.
  std::vector<troupe::ObjectRef<uint64_t>> digests;
  for (int i = 0; i < scale.large_objects; ++i) {
    auto bytes = troupe::Task(MakeBytes)
                     .SetMaxRetries(-1)
                     .SetSchedulingStrategy(troupe::Spread{})
                     .Remote(scale.large_object_bytes, static_cast<int64_t>(i));
    digests.push_back(troupe::Task(DigestOf)
                          .SetMaxRetries(-1)
                          .SetSchedulingStrategy(troupe::Spread{})
                          .Remote(bytes));
    result.tasks += 2;
  }

  if (killer != nullptr) {
    troupe::Wait(ends, static_cast<int>(ends.size()), std::chrono::minutes(5));
    killer->KillNodeNow();
  }
  auto record = [&](std::string error) {
    if (result.errors.size() < 20) result.errors.push_back(std::move(error));
  };
  for (int c = 0; c < scale.chains; ++c) {
    const int64_t words = c % scale.large_chain_every == 0 ? kLargeWords : kSmallWords;
    try {
      if (*troupe::Get(ends[c], std::chrono::minutes(5)) !=
          ExpectedChain(c, words, scale.chain_length)) {
        record(absl::StrCat("chain ", c, ": wrong value"));
      }
    } catch (const std::exception& e) {
      record(absl::StrCat("chain ", c, ": ", e.what()));
    }
  }
  for (int i = 0; i < scale.large_objects; ++i) {
    try {
      const uint64_t expected = DigestOf(MakeBytes(scale.large_object_bytes, i));
      if (*troupe::Get(digests[i], std::chrono::minutes(5)) != expected) {
        record(absl::StrCat("large object ", i, ": wrong digest"));
      }
    } catch (const std::exception& e) {
      record(absl::StrCat("large object ", i, ": ", e.what()));
    }
  }
  caller.join();
  if (!caller_error.empty()) record("submitting actor calls: " + caller_error);
  for (int a = 0; a < scale.actors; ++a) {
    for (int i = 0; i < static_cast<int>(calls[a].size()); ++i) {
      try {
        const int64_t got = *troupe::Get(calls[a][i], std::chrono::minutes(5));
        if (got != i) record(absl::StrCat("actor ", a, " call ", i, ": answered ", got));
      } catch (const std::exception& e) {
        record(absl::StrCat("actor ", a, " call ", i, ": ", e.what()));
      }
    }
  }
  result.tasks += scale.actors * scale.calls_per_actor;
  for (auto& actor : actors) actor.Kill(/*no_restart=*/true);
  result.wall = absl::Now() - start;
  return result;
}

// Sum of every process's task counters in the GCS KV (written at Shutdown at the latest).
troupe::rpc::TaskCounters ClusterTaskCounters(TestCluster& cluster) {
  troupe::rpc::TaskCounters total;
  auto keys = cluster.gcs().KVKeys(troupe::kTaskCountersNamespace, "");
  if (!keys.ok()) return total;
  for (const auto& key : *keys) {
    auto value = cluster.gcs().KVGet(troupe::kTaskCountersNamespace, key);
    troupe::rpc::TaskCounters one;
    if (!value.ok() || !value->has_value() || !one.ParseFromString(**value)) continue;
    total.set_tasks_submitted(total.tasks_submitted() + one.tasks_submitted());
    total.set_tasks_retried(total.tasks_retried() + one.tasks_retried());
    total.set_tasks_failed(total.tasks_failed() + one.tasks_failed());
    total.set_tasks_reconstructed(total.tasks_reconstructed() + one.tasks_reconstructed());
  }
  return total;
}

// Session directories under the cluster's temp root.
std::vector<std::string> SessionDirs(const std::string& temp_root) {
  std::vector<std::string> dirs;
  DIR* dir = opendir(temp_root.c_str());
  if (dir == nullptr) return dirs;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (absl::StartsWith(name, "session_") && name != "session_latest") {
      dirs.push_back(temp_root + "/" + name);
    }
  }
  closedir(dir);
  return dirs;
}

// Entries of `dir` that are objects (not the store's pool of kept, reusable files, nor the lock
// file that marks its owner: src/object_store/store_dir_owner.h).
std::vector<std::string> ObjectFilesIn(const std::string& dir) {
  std::vector<std::string> files;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return files;
  while (dirent* entry = readdir(d)) {
    const std::string name = entry->d_name;
    if (name == "." || name == ".." || absl::StartsWith(name, "kept-") || name == "owner.lock") {
      continue;
    }
    files.push_back(dir + "/" + name);
  }
  closedir(d);
  return files;
}

// The object store directory of a node's session directory, as `troupe start` and `troupe stop`
// name it (ObjectStoreDirOf), so that the test looks where the raylet keeps its objects.
std::string StoreDirOf(const std::string& session_dir) {
  auto session = troupe::Session::Open(session_dir);
  EXPECT_TRUE(session.ok()) << session.status();
  return session.ok() ? troupe::ObjectStoreDirOf(*session) : session_dir + " (not a session)";
}

// An empty store proves nothing if the test looks in the wrong place: each live node's store
// directory must exist.
void ExpectStoresExist(const std::vector<std::string>& session_dirs) {
  for (const auto& session : session_dirs) {
    struct stat st;
    EXPECT_EQ(stat(StoreDirOf(session).c_str(), &st), 0)
        << "no object store at " << StoreDirOf(session) << " for the live node of " << session;
  }
}

// For a failure message: which processes still map any of `paths` (readers holding a pin).
std::string MappedBy(const std::vector<std::string>& paths) {
  std::string out;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* entry = readdir(proc)) {
    int pid;
    if (!absl::SimpleAtoi(entry->d_name, &pid)) continue;
    std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
    std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
    for (const auto& path : paths) {
      if (absl::StrContains(text, path)) {
        std::ifstream cmdline(absl::StrCat("/proc/", pid, "/cmdline"));
        std::string command;
        std::getline(cmdline, command, '\0');
        absl::StrAppend(&out, "\n  ", path, " is mapped by pid ", pid, " (", command, ")");
      }
    }
  }
  closedir(proc);
  return out.empty() ? "\n  (no process maps them)" : out;
}

void RunChaos(const Scale& scale) {
  const std::vector<std::string> node_flags = {"--num-cpus=2", "--object-store-memory=512MiB"};
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--object-store-memory=512MiB"}));
  for (int i = 0; i < scale.worker_nodes; ++i) ASSERT_OK(cluster.AddWorker(node_flags));

  RunResult calm, chaos;
  KillCounts kills;
  std::string killer_error;
  {
    Driver driver(cluster);
    calm = RunWorkload(scale, nullptr);
    EXPECT_TRUE(calm.errors.empty()) << "without kills: " << absl::StrJoin(calm.errors, "\n");

    Killer killer(cluster, node_flags, scale, troupe::testing::TestSeed());
    killer.Start();
    chaos = RunWorkload(scale, &killer);
    kills = killer.Stop();
    killer_error = killer.error();
    EXPECT_TRUE(chaos.errors.empty()) << "with kills: " << absl::StrJoin(chaos.errors, "\n");
  }
  EXPECT_EQ(killer_error, "") << "a killed node could not be replaced";
  EXPECT_GT(kills.workers + kills.raylets, 0) << "the killer never killed anything";

  const troupe::rpc::TaskCounters counters = ClusterTaskCounters(cluster);
  std::cout << "chaos summary: tasks=" << calm.tasks + chaos.tasks
            << " kills=" << kills.workers + kills.raylets << " (workers=" << kills.workers
            << " raylets=" << kills.raylets << ") retries=" << counters.tasks_retried()
            << " reconstructions=" << counters.tasks_reconstructed()
            << " wall_with_kills=" << absl::ToDoubleSeconds(chaos.wall)
            << "s wall_without_kills=" << absl::ToDoubleSeconds(calm.wall) << "s" << std::endl;

  // The driver is gone: no object may be left in any live node's store or spill directory.
  // (A killed raylet's store keeps its files until `troupe stop`, checked below.)
  const std::vector<std::string> sessions = SessionDirs(cluster.temp_root());
  std::vector<std::string> live_sessions;
  for (const auto& session : sessions) {
    std::ifstream pid_file(session + "/pids/raylet.pid");
    int pid = 0;
    if (pid_file >> pid && kill(pid, 0) == 0) live_sessions.push_back(session);
  }
  EXPECT_EQ(live_sessions.size(), static_cast<size_t>(scale.worker_nodes + 1));
  ExpectStoresExist(live_sessions);
  std::vector<std::string> left;
  EXPECT_TRUE(WaitUntil(
      [&] {
        left.clear();
        for (const auto& session : live_sessions) {
          for (auto& f : ObjectFilesIn(StoreDirOf(session))) left.push_back(f);
          for (auto& f : ObjectFilesIn(session + "/spill")) left.push_back(f);
        }
        return left.empty();
      },
      absl::Seconds(20), "every store and spill directory to be empty"))
      << "objects left behind: " << absl::StrJoin(left, ", ") << MappedBy(left);

  // `troupe stop` removes what killed raylets could not (their stores).
  std::vector<std::string> store_dirs;
  for (const auto& session : sessions) store_dirs.push_back(StoreDirOf(session));
  const std::string temp_root = cluster.temp_root();
  { TestCluster gone = std::move(cluster); }  // checks available == total and no process left
  for (const auto& dir : store_dirs) {
    struct stat st;
    EXPECT_NE(stat(dir.c_str(), &st), 0) << dir << " is left";
  }
}

bool long_run = false;  // --long: the chaos_long_test size

// Regression (seed 2686929764): a reader killed while it held an object pinned kept it in the
// store for good: freed by its owner, the object waited for a release that never came.
TEST(ChaosTest, ObjectsPinnedByAKilledReaderAreFreed) {
  if (long_run) GTEST_SKIP() << "runs in the normal test run only";
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=1", "--object-store-memory=256MiB"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=1", "--object-store-memory=256MiB"}));
  {
    Driver driver(cluster);
    for (int i = 0; i < 4; ++i) {  // on either node, read on the same or the other one
      auto bytes = troupe::Task(MakeBytes).SetSchedulingStrategy(troupe::Spread{}).Remote(
          int64_t{1} << 20, static_cast<int64_t>(i));
      auto died = troupe::Task(DieWhileReading)
                      .SetMaxRetries(0)
                      .SetSchedulingStrategy(troupe::Spread{})
                      .Remote(bytes);
      EXPECT_THROW(troupe::Get(died, std::chrono::minutes(1)), std::exception);
    }
  }
  ExpectStoresExist(SessionDirs(cluster.temp_root()));
  std::vector<std::string> left;
  EXPECT_TRUE(WaitUntil(
      [&] {
        left.clear();
        for (const auto& session : SessionDirs(cluster.temp_root())) {
          for (auto& f : ObjectFilesIn(StoreDirOf(session))) left.push_back(f);
        }
        return left.empty();
      },
      absl::Seconds(20), "every store to be empty"))
      << "objects left behind: " << absl::StrJoin(left, ", ") << MappedBy(left);
}

// Regression (CI, seed 1342451914): a task whose raylet was SIGKILLed while it stored its result
// replied "raylet ...: Connection reset by peer" as an application error before the kernel's
// parent-death signal ended it, and the caller took that as the task's value.
TEST(ChaosTest, TaskWhoseRayletDiesMidTaskIsRetriedNotFailed) {
  if (long_run) GTEST_SKIP() << "runs in the normal test run only";
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=0", "--object-store-memory=256MiB"}));
  for (int i = 0; i < 2; ++i) {
    ASSERT_OK(cluster.AddWorker({"--num-cpus=1", "--object-store-memory=256MiB"}));
  }
  const std::string marker = cluster.temp_root() + "/killed-once";
  {
    Driver driver(cluster);
    auto result = troupe::Task(StoreWhileMyRayletDies).SetMaxRetries(2).Remote(marker);
    EXPECT_EQ(*troupe::Get(result, std::chrono::minutes(2)), 42);
  }
  struct stat st;
  EXPECT_EQ(stat(marker.c_str(), &st), 0) << "the first attempt never ran";
}

TEST(ChaosTest, WorkloadSurvivesKilledWorkersAndNodes) {
  RunChaos(long_run ? LongScale() : ShortScale());
}

}  // namespace

int main(int argc, char** argv) {
  // In worker mode this never returns: the raylet started this binary to run tasks.
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) long_run |= std::string(argv[i]) == "--long";
  return RUN_ALL_TESTS();
}
