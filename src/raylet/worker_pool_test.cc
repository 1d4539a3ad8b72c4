// WorkerPool on a fake ProcessLauncher and a FakeClock: what it starts, when it reuses a worker,
// when it kills one, and what it reports when one exits. No process is forked.
#include "src/raylet/worker_pool.h"

#include <atomic>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/common/wait_until.h"

namespace troupe {
namespace {

// Records starts and kills; processes exit when the test says so. Single-threaded tests only.
class FakeProcessLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<int> Start(const ProcessSpec& spec) override {
    if (!fail_next_start.ok()) {
      absl::Status status = fail_next_start;
      fail_next_start = absl::OkStatus();
      return status;
    }
    started.push_back(spec);
    ++starts;
    return next_pid_++;
  }
  void Kill(int pid) override { killed.push_back(pid); }
  void Terminate(int pid) override { terminated.push_back(pid); }
  std::optional<std::string> CheckExited(int pid) override {
    auto it = exits.find(pid);
    if (it == exits.end()) return std::nullopt;
    std::string how = it->second;
    exits.erase(it);
    return how;
  }
  bool Exists(int pid) override { return !gone.count(pid); }
  void KillAndWait(int pid) override { killed.push_back(pid); }

  std::vector<ProcessSpec> started;
  std::vector<int> killed;
  std::vector<int> terminated;       // SIGTERM: asked to exit
  std::map<int, std::string> exits;  // pid -> how, reported once by CheckExited
  std::set<int> gone;                // non-children (drivers) that no longer exist
  absl::Status fail_next_start;
  std::atomic<int> starts{0};  // readable from another thread than the starting one

 private:
  int next_pid_ = 100;
};

// The value of NAME in a process environment, or nullopt.
std::optional<std::string> EnvOf(const ProcessSpec& spec, const std::string& name) {
  for (const std::string& entry : spec.env) {
    if (absl::StartsWith(entry, name + "=")) return entry.substr(name.size() + 1);
  }
  return std::nullopt;
}

using PopSlot = std::shared_ptr<std::optional<absl::StatusOr<std::shared_ptr<Worker>>>>;

// The worker a pop was answered with; nullptr if unanswered or failed.
std::shared_ptr<Worker> WorkerOf(const PopSlot& slot) {
  if (!slot->has_value() || !(*slot)->ok()) return nullptr;
  return ***slot;
}

class WorkerPoolTest : public ::testing::Test {
 protected:
  WorkerPoolTest() { job_.set_job_id(job_id_.Binary()); }

  WorkerPool& Pool() {
    if (!pool_) {
      pool_ = std::make_unique<WorkerPool>(
          options_,
          [](const rpc::JobInfo&) -> absl::StatusOr<WorkerPool::Program> {
            return WorkerPool::Program{"/bin/app", "/jobs/7"};
          },
          [this](const Worker& worker, const std::string& how) {
            exits_.emplace_back(worker.worker_id, how);
          },
          &clock_, &processes_);
      pool_->set_raylet_address("10.0.0.5:9000");
    }
    return *pool_;
  }

  // Pops a worker; the result lands in the returned slot (empty until it is answered).
  PopSlot Pop(const std::string& devices) {
    auto slot = std::make_shared<std::optional<absl::StatusOr<std::shared_ptr<Worker>>>>();
    Pool().PopWorker(job_, devices, [slot](absl::StatusOr<std::shared_ptr<Worker>> worker) {
      *slot = std::move(worker);
    });
    return slot;
  }
  // The worker id the pool gave the `i`th process it started.
  WorkerId StartedWorker(int i) {
    return *WorkerId::FromHex(*EnvOf(processes_.started.at(i), "TROUPE_WORKER_ID"));
  }
  // Starts a worker for `devices`, registers it and gives it back idle; returns it.
  std::shared_ptr<Worker> IdleWorker(const std::string& devices) {
    auto slot = Pop(devices);
    const int i = static_cast<int>(processes_.started.size()) - 1;
    EXPECT_TRUE(Pool().RegisterWorker(StartedWorker(i), 100 + i, 30000 + i, job_id_, false).ok());
    std::shared_ptr<Worker> worker = WorkerOf(slot);
    EXPECT_NE(worker, nullptr);
    Pool().PushWorker(worker);
    return worker;
  }

  WorkerPoolOptions options_ = [] {
    WorkerPoolOptions options;
    options.node_id_hex = "abc";
    options.node_ip = "10.0.0.5";
    options.gcs_address = "10.0.0.1:6380";
    options.token = "token";
    options.log_dir = "/logs";
    options.idle_timeout = absl::Seconds(60);
    options.startup_timeout = absl::Seconds(30);
    // KillAll (the pool's destructor) waits this long in real time for fake processes that
    // never exit: tests of the grace set their own.
    options.stop_grace = absl::ZeroDuration();
    return options;
  }();
  const JobId job_id_ = JobId::FromInt(7);
  rpc::JobInfo job_;
  FakeClock clock_;
  FakeProcessLauncher processes_;
  std::vector<std::pair<WorkerId, std::string>> exits_;
  std::unique_ptr<WorkerPool> pool_;
};

TEST_F(WorkerPoolTest, StartsTheJobsExecutableAndHandsTheWorkerOverWhenItRegisters) {
  job_.add_driver_argv("--epochs=5");
  auto slot = Pop("0,1");
  ASSERT_EQ(processes_.started.size(), 1u);
  const ProcessSpec& spec = processes_.started[0];
  EXPECT_EQ(spec.argv, (std::vector<std::string>{"/bin/app", "--epochs=5"}));
  EXPECT_EQ(spec.working_dir, "/jobs/7");
  const WorkerId id = StartedWorker(0);
  EXPECT_EQ(spec.log_path, "/logs/worker-" + id.ShortHex() + ".log");
  EXPECT_EQ(EnvOf(spec, "TROUPE_WORKER_MODE"), "1");
  EXPECT_EQ(EnvOf(spec, "TROUPE_RAYLET_ADDRESS"), "10.0.0.5:9000");
  EXPECT_EQ(EnvOf(spec, "TROUPE_GCS_ADDRESS"), "10.0.0.1:6380");
  EXPECT_EQ(EnvOf(spec, "TROUPE_JOB_ID"), job_id_.Hex());
  EXPECT_EQ(EnvOf(spec, "TROUPE_GPU_IDS"), "0,1");
  EXPECT_EQ(EnvOf(spec, "TROUPE_GPU_VISIBILITY"), "all");
  EXPECT_FALSE(slot->has_value());  // not until it registers

  ASSERT_TRUE(Pool().RegisterWorker(id, 100, 31000, job_id_, /*is_driver=*/false).ok());
  std::shared_ptr<Worker> worker = WorkerOf(slot);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(worker->worker_id, id);
  EXPECT_EQ(worker->address, "10.0.0.5:31000");
  EXPECT_EQ(worker->cuda_visible_devices, "0,1");
  EXPECT_EQ(Pool().num_workers(), 1);
}

// Regression (issue 30 item 9): workers did not know their job's namespace, so GetActor inside
// a task did not find the driver's named actors.
TEST_F(WorkerPoolTest, WorkersGetTheirJobsNamespace) {
  job_.set_namespace_name("shop");
  Pop("");
  ASSERT_EQ(processes_.started.size(), 1u);
  EXPECT_EQ(EnvOf(processes_.started[0], "TROUPE_NAMESPACE"), "shop");
}

TEST_F(WorkerPoolTest, AWorkerThatWasNotStartedHereCannotRegister) {
  EXPECT_TRUE(absl::IsNotFound(
      Pool().RegisterWorker(WorkerId::FromRandom(), 1, 2, job_id_, /*is_driver=*/false)));
  EXPECT_TRUE(
      Pool().RegisterWorker(WorkerId::FromRandom(), 1, 2, job_id_, /*is_driver=*/true).ok());
  EXPECT_TRUE(Pool().Snapshot().empty());  // drivers are not the pool's workers
}

TEST_F(WorkerPoolTest, AssignedVisibilityMasksCudaVisibleDevices) {
  options_.mask_gpus = true;
  setenv("CUDA_VISIBLE_DEVICES", "4,5,6", 1);
  Pop("1,2");
  unsetenv("CUDA_VISIBLE_DEVICES");
  const ProcessSpec& spec = processes_.started.at(0);
  EXPECT_EQ(EnvOf(spec, "CUDA_VISIBLE_DEVICES"), "5,6");  // the raylet's devices 1 and 2
  EXPECT_EQ(EnvOf(spec, "TROUPE_GPU_VISIBILITY"), "assigned");
}

TEST_F(WorkerPoolTest, AnIdleWorkerIsReusedForTheSameJobAndDevicesOnly) {
  std::shared_ptr<Worker> idle = IdleWorker("0");
  auto same = Pop("0");
  EXPECT_EQ(WorkerOf(same), idle);
  EXPECT_EQ(processes_.started.size(), 1u);

  // Taken now: the next pop starts another one; so does one for other devices.
  Pop("0");
  EXPECT_EQ(processes_.started.size(), 2u);
  Pop("1");
  EXPECT_EQ(processes_.started.size(), 3u);
}

TEST_F(WorkerPoolTest, IdleWorkersAreStoppedAfterTheIdleTimeout) {
  std::shared_ptr<Worker> idle = IdleWorker("");
  clock_.Advance(absl::Seconds(60));
  Pool().Tick();
  EXPECT_TRUE(processes_.killed.empty());
  clock_.Advance(absl::Milliseconds(1));
  Pool().Tick();
  EXPECT_EQ(processes_.killed, std::vector<int>{idle->pid});
  // Being killed, it is not handed out again.
  Pop("");
  EXPECT_EQ(processes_.started.size(), 2u);

  processes_.exits[idle->pid] = "was killed by signal 9";
  Pool().Tick();
  ASSERT_EQ(exits_.size(), 1u);
  EXPECT_EQ(exits_[0].first, idle->worker_id);
  EXPECT_EQ(exits_[0].second, "was killed by signal 9");
  EXPECT_EQ(Pool().num_workers(), 1);  // only the new one
}

// Regression (issue 30 item 8): a worker killed while leased and then given back (its lease
// returned before its exit was seen) was handed to the next pop, which got a dying process.
TEST_F(WorkerPoolTest, AKilledWorkerIsNeverHandedOutAgain) {
  std::shared_ptr<Worker> worker = IdleWorker("");
  ASSERT_EQ(WorkerOf(Pop("")), worker);  // leased
  Pool().KillWorker(worker->worker_id);
  EXPECT_EQ(processes_.killed, std::vector<int>{worker->pid});
  Pool().PushWorker(worker);  // its lease came back before the exit
  Pop("");
  EXPECT_EQ(processes_.started.size(), 2u) << "the killed worker was reused";
}

TEST_F(WorkerPoolTest, AWorkerThatNeverRegistersIsKilledAndItsPopFails) {
  auto slot = Pop("");
  const int pid = 100;
  clock_.Advance(absl::Seconds(30));
  Pool().Tick();
  EXPECT_TRUE(processes_.killed.empty());
  clock_.Advance(absl::Milliseconds(1));
  Pool().Tick();
  EXPECT_EQ(processes_.killed, std::vector<int>{pid});
  EXPECT_FALSE(slot->has_value());

  processes_.exits[pid] = "was killed by signal 9";
  Pool().Tick();
  ASSERT_TRUE(slot->has_value());
  ASSERT_FALSE((*slot)->ok());
  EXPECT_TRUE(absl::IsUnavailable((*slot)->status()));
  EXPECT_EQ((*slot)->status().message(),
            "worker process 100 was killed by signal 9 before it registered; see /logs/worker-" +
                StartedWorker(0).ShortHex() + ".log");
  ASSERT_EQ(exits_.size(), 1u);
}

// Regression: a thousand actors created at once forked a thousand workers whose start-up starved
// the raylet (no health-check answer for 3 s: the node was declared dead). Starts now wait for a
// slot: a worker registering or dying frees one.
TEST_F(WorkerPoolTest, AtMostMaxStartingWorkersStartAtOnce) {
  options_.max_starting_workers = 2;
  auto first = Pop("");
  auto second = Pop("");
  ASSERT_EQ(processes_.starts.load(), 2);
  PopSlot third;
  std::thread popper([&] { third = Pop(""); });  // blocks: both slots are taken
  EXPECT_FALSE(troupe::testing::WaitUntil([&] { return processes_.starts.load() > 2; },
                                          absl::Milliseconds(300), "a third start"));
  // The first registers: its slot goes to the third.
  ASSERT_TRUE(Pool().RegisterWorker(StartedWorker(0), 100, 31000, job_id_, false).ok());
  popper.join();
  EXPECT_EQ(processes_.starts.load(), 3);
  EXPECT_NE(WorkerOf(first), nullptr);
  // The second dies starting: its slot is free again, and a fourth starts without waiting.
  processes_.exits[101] = "exited with status 1";
  Pool().Tick();
  ASSERT_TRUE(second->has_value());
  EXPECT_FALSE((*second)->ok());
  auto fourth = Pop("");
  EXPECT_EQ(processes_.starts.load(), 4);
  EXPECT_FALSE(third->has_value());  // still starting
}

TEST_F(WorkerPoolTest, AFailedStartIsReportedAtOnce) {
  processes_.fail_next_start = absl::ResourceExhaustedError("fork: out of memory");
  auto slot = Pop("");
  ASSERT_TRUE(slot->has_value());
  EXPECT_EQ((*slot)->status().message(), "fork: out of memory");
  EXPECT_EQ(Pool().num_workers(), 0);
}

TEST_F(WorkerPoolTest, AFailedStartFreesItsSlot) {
  options_.max_starting_workers = 1;
  processes_.fail_next_start = absl::ResourceExhaustedError("fork: out of memory");
  auto failed = Pop("");
  ASSERT_TRUE(failed->has_value());
  EXPECT_EQ((*failed)->status().message(), "fork: out of memory");
  auto next = Pop("");  // would block for startup_timeout had the failed start kept the slot
  EXPECT_EQ(processes_.starts.load(), 1);
  EXPECT_FALSE(next->has_value());  // started, not registered yet
}

TEST_F(WorkerPoolTest, StopJobWorkersSparesDetachedActorsAndDrivers) {
  std::shared_ptr<Worker> plain = IdleWorker("");
  std::shared_ptr<Worker> detached = IdleWorker("0");
  detached->detached = true;
  ASSERT_TRUE(Pool().RegisterWorker(WorkerId::FromRandom(), 999, 1, job_id_, true).ok());
  Pool().StopJobWorkers(job_id_);
  EXPECT_EQ(processes_.terminated, std::vector<int>{plain->pid});
}

// Regression: a job's workers were SIGKILLed at its end, before they reported the task events
// they buffered (tasks stayed PENDING for good) and with "was killed by signal 9" in the log.
TEST_F(WorkerPoolTest, AStoppedWorkerGetsSigtermAndAGraceBeforeSigkill) {
  options_.stop_grace = absl::Seconds(3);
  std::shared_ptr<Worker> polite = IdleWorker("");
  std::shared_ptr<Worker> stubborn = IdleWorker("0");
  Pool().StopJobWorkers(job_id_);
  EXPECT_EQ(std::set<int>(processes_.terminated.begin(), processes_.terminated.end()),
            (std::set<int>{polite->pid, stubborn->pid}));
  EXPECT_TRUE(processes_.killed.empty());
  // Never handed out again while it exits, even if its lease is given back meanwhile.
  Pool().PushWorker(polite);
  auto slot = Pop("");
  EXPECT_EQ(processes_.started.size(), 3u);
  EXPECT_FALSE(slot->has_value());
  // One exits within the grace: no SIGKILL, and its exit says it was stopped.
  processes_.exits[polite->pid] = "exited with code 0";
  clock_.Advance(absl::Seconds(2));
  Pool().Tick();
  EXPECT_TRUE(processes_.killed.empty());
  ASSERT_EQ(exits_.size(), 1u);
  EXPECT_EQ(exits_[0].first, polite->worker_id);
  EXPECT_EQ(exits_[0].second, "was stopped (exited with code 0)");
  // The other ignores SIGTERM: SIGKILL once the grace is over, once.
  clock_.Advance(absl::Seconds(2));
  Pool().Tick();
  EXPECT_EQ(processes_.killed, std::vector<int>{stubborn->pid});
  Pool().Tick();
  EXPECT_EQ(processes_.killed, std::vector<int>{stubborn->pid});
  processes_.exits[stubborn->pid] = "was killed by signal 9";
  Pool().Tick();
  ASSERT_EQ(exits_.size(), 2u);
  EXPECT_EQ(exits_[1].second, "was stopped (was killed by signal 9)");
  // The process started for the pop above ends with the pool (no wait for its grace).
  processes_.exits[100 + 2] = "exited with code 0";
}

TEST_F(WorkerPoolTest, KillAllAsksFirstAndKillsOnlyWhatIsLeftAfterTheGrace) {
  options_.stop_grace = absl::Milliseconds(50);
  std::shared_ptr<Worker> polite = IdleWorker("");
  std::shared_ptr<Worker> stubborn = IdleWorker("0");
  processes_.exits[polite->pid] = "exited with code 0";
  Pool().KillAll();
  EXPECT_EQ(std::set<int>(processes_.terminated.begin(), processes_.terminated.end()),
            (std::set<int>{polite->pid, stubborn->pid}));
  EXPECT_EQ(processes_.killed, std::vector<int>{stubborn->pid});
  EXPECT_EQ(Pool().num_workers(), 0);
}

TEST_F(WorkerPoolTest, AGoneDriverIsReportedAsExited) {
  const WorkerId driver = WorkerId::FromRandom();
  ASSERT_TRUE(Pool().RegisterWorker(driver, 999, 1, job_id_, /*is_driver=*/true).ok());
  Pool().Tick();
  EXPECT_TRUE(exits_.empty());
  processes_.gone.insert(999);
  Pool().Tick();
  ASSERT_EQ(exits_.size(), 1u);
  EXPECT_EQ(exits_[0].first, driver);
  EXPECT_EQ(exits_[0].second, "exited");
}

}  // namespace
}  // namespace troupe
