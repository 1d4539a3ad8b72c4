// Actors on real clusters: ordering, state, names, kills, restarts, death causes, GPU packing.
// Like tasks_test, this binary is also the worker program. Async actors and concurrency groups
// are in actors_async_test.cc, linked into the same binary.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"
#include "troupe/util/actor_pool.h"
#include "troupe/util/queue.h"

namespace {

class Counter {
 public:
  explicit Counter(int start) : value_(start) {}
  static Counter* Create(int start) { return new Counter(start); }
  static Counter* Broken(int) { throw std::invalid_argument("no counters today"); }
  int Add(int x) { return value_ += x; }
  int Get() { return value_; }
  int Echo(int x) { return x; }
  int Pid() { return static_cast<int>(getpid()); }
  bool Restarted() { return troupe::WasCurrentActorRestarted(); }
  // "<TROUPE_GPU_IDS as GetGpuIds sees them>|<CUDA_VISIBLE_DEVICES>".
  std::string Devices() {
    std::string ids;
    for (int id : troupe::GetGpuIds()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return ids + "|" + (visible ? visible : "<unset>");
  }
  std::string Node() { return std::getenv("TROUPE_NODE_ID"); }
  int Leave() {
    troupe::ExitActor();
    return value_;
  }
  // Submits `n` tasks and waits for them: this actor becomes the owner of their leases.
  int SubmitAndWait(int n);
  // Polls troupe::IsCancelled for at most 120 s; remembers whether it saw it.
  int PollUntilCancelled() {
    for (int i = 0; i < 12000 && !troupe::IsCancelled(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    saw_cancel_ = troupe::IsCancelled();
    return value_;
  }
  bool SawCancel() { return saw_cancel_; }
  // Ignores cancellation: only a kill ends it early.
  int Block() {
    std::this_thread::sleep_for(std::chrono::minutes(10));
    return value_;
  }
  // Takes a non-const reference (its own copy of the caller's vector): adds them all, and
  // appends the new total to `values`; returns the total plus the vector's new size.
  int AddAll(std::vector<int>& values) {
    for (int v : values) value_ += v;
    values.push_back(value_);
    return value_ + static_cast<int>(values.size());
  }
  std::map<std::string, std::string> Context();

 private:
  int value_;
  bool saw_cancel_ = false;
};

// A task that uses an actor through a handle it was given.
int AddThroughHandle(troupe::ActorHandle<Counter> counter, int x) {
  return *troupe::Get(counter.Task(&Counter::Add).Remote(x));
}

// A task that finds an actor by name in its job's namespace; -1 if it finds none.
int AddByName(std::string name, int x) {
  auto counter = troupe::GetActor<Counter>(name);
  if (!counter.has_value()) return -1;
  return *troupe::Get(counter->Task(&Counter::Add).Remote(x));
}

int Plus(int a, int b) { return a + b; }

// A task that takes three items from a queue it was given, blocking until they come.
std::string TakeThree(troupe::util::Queue<std::string> queue) {
  std::string taken;
  for (int i = 0; i < 3; ++i) taken += queue.Get(std::chrono::seconds(60));
  return taken;
}

// A task taking a non-const reference: it changes its own copy.
int AppendAndSum(std::vector<int>& values, int extra) {
  values.push_back(extra);
  int sum = 0;
  for (int v : values) sum += v;
  return sum;
}

// troupe::GetRuntimeContext() as text, field by field, for comparing in the driver.
std::map<std::string, std::string> Describe(const troupe::RuntimeContext& context) {
  std::string resources;
  for (const auto& [name, amount] : context.assigned_resources) {
    resources += (resources.empty() ? "" : ",") + name + "=" + std::to_string(amount);
  }
  return {{"job", context.job_id},
          {"node", context.node_id},
          {"task", context.task_id},
          {"actor", context.actor_id},
          {"namespace", context.namespace_name},
          {"resources", resources},
          {"placement_group", context.placement_group_id},
          {"bundle", std::to_string(context.bundle_index)},
          {"restarted", context.was_current_actor_restarted ? "yes" : "no"}};
}
std::map<std::string, std::string> ContextOfTask() { return Describe(troupe::GetRuntimeContext()); }
std::map<std::string, std::string> Counter::Context() {
  return Describe(troupe::GetRuntimeContext());
}

int Counter::SubmitAndWait(int n) {
  std::vector<troupe::ObjectRef<int>> refs;
  for (int i = 0; i < n; ++i) refs.push_back(troupe::Task(Plus).Remote(i, 1));
  int sum = 0;
  for (const auto& value : troupe::Get(refs)) sum += *value;
  return sum;
}

TROUPE_REMOTE(Plus, &Counter::SubmitAndWait, Counter::Create, Counter::Broken, &Counter::Add,
              &Counter::Get, &Counter::Echo, &Counter::Pid, &Counter::Restarted, &Counter::Devices,
              &Counter::Node, &Counter::Leave, AddThroughHandle, AddByName,
              &Counter::PollUntilCancelled, &Counter::SawCancel, &Counter::Block, &Counter::AddAll,
              &Counter::Context, AppendAndSum, ContextOfTask, TakeThree);

using troupe::testing::CommandResult;
using troupe::testing::TestCluster;

using troupe::testing::Driver;
using troupe::testing::WaitUntil;

// Calls `counter` until a call fails with ActorDiedError (the death reaches callers after the
// GCS has seen it); returns the error's text, or "" if every call within `timeout` succeeded.
std::string DeathOf(troupe::ActorHandle<Counter>& counter,
                    absl::Duration timeout = absl::Seconds(10)) {
  std::string cause;
  (void)WaitUntil(
      [&] {
        try {
          troupe::Get(counter.Task(&Counter::Get).Remote(), std::chrono::seconds(10));
          return false;
        } catch (const troupe::ActorDiedError& e) {
          cause = e.what();
          return true;
        }
      },
      timeout, "a call to fail with ActorDiedError");
  return cause;
}

TEST(ActorsTest, CallsRunInOrderAndStateLives) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create).Remote(0);
  std::vector<troupe::ObjectRef<int>> totals;
  for (int i = 1; i <= 10000; ++i) totals.push_back(counter.Task(&Counter::Add).Remote(1));
  auto values = troupe::Get(totals);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(*values[i], i + 1) << "call " << i << " out of order";
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Get).Remote()), 10000);
  // Handles travel to tasks, which call the same actor.
  EXPECT_EQ(*troupe::Get(troupe::Task(AddThroughHandle).Remote(counter, 5)), 10005);
}

TEST(ActorsTest, NamedDetachedActorIsFoundByAnotherDriver) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  {
    Driver first(cluster, "shop");
    auto counter = troupe::Actor(Counter::Create)
                       .SetName("inventory")
                       .SetLifetime(troupe::Detached{})
                       .Remote(40);
    EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Add).Remote(2)), 42);
    try {
      troupe::Actor(Counter::Create).SetName("inventory").Remote(0);
      FAIL() << "a duplicate name must be refused";
    } catch (const troupe::TroupeError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "already exists")) << e.what();
    }
    // Get-or-create: the live actor of that name comes back (its state, not a new Create(0)).
    auto same = troupe::Actor(Counter::Create).SetName("inventory").SetGetIfExists().Remote(0);
    EXPECT_EQ(same.binary_id(), counter.binary_id());
    EXPECT_EQ(*troupe::Get(same.Task(&Counter::Get).Remote()), 42);
    // Callers racing to get-or-create a new name all get one actor.
    std::vector<std::string> ids(4);
    std::vector<std::thread> racers;
    for (int i = 0; i < 4; ++i) {
      racers.emplace_back([&ids, i] {
        ids[i] =
            troupe::Actor(Counter::Create).SetName("raced").SetGetIfExists().Remote(i).binary_id();
      });
    }
    for (auto& racer : racers) racer.join();
    EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 1u);
    auto raced = troupe::GetActor<Counter>("raced");
    ASSERT_TRUE(raced.has_value());
    EXPECT_EQ(raced->binary_id(), ids[0]);
    try {
      troupe::Actor(Counter::Create).SetGetIfExists().Remote(0);
      FAIL() << "get-or-create without a name must be refused";
    } catch (const troupe::InvalidArgumentError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), "SetName")) << e.what();
    }
  }
  Driver second(cluster, "shop");
  auto found = troupe::GetActor<Counter>("inventory");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(*troupe::Get(found->Task(&Counter::Get).Remote()), 42);
  // Workers run in their job's namespace: a task of this job finds the actor by name too.
  EXPECT_EQ(*troupe::Get(troupe::Task(AddByName).Remote(std::string("inventory"), 1)), 43);
  EXPECT_FALSE(troupe::GetActor<Counter>("inventory", "other-namespace").has_value());
  found->Kill();
  EXPECT_TRUE(WaitUntil([] { return !troupe::GetActor<Counter>("inventory").has_value(); },
                        absl::Seconds(5), "the killed actor's name to be released"));
}

// troupe::util::ActorPool shares two actors out to a stream of calls (one call per actor at a
// time), and troupe::util::Queue is a bounded queue that a task and the driver share.
TEST(ActorsTest, ActorPoolAndQueueOnACluster) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  using Handle = troupe::ActorHandle<Counter>;
  const Handle low = troupe::Actor(Counter::Create).Remote(0);
  const Handle high = troupe::Actor(Counter::Create).Remote(1000);
  troupe::util::ActorPool<Counter, int> pool({low, high});
  auto echo = [](const Handle& actor, int v) { return actor.Task(&Counter::Echo).Remote(v); };
  std::vector<int> values;
  for (int i = 0; i < 20; ++i) values.push_back(i);
  EXPECT_EQ(pool.Map(echo, values), values);
  std::vector<int> unordered = pool.MapUnordered(echo, values);
  std::sort(unordered.begin(), unordered.end());
  EXPECT_EQ(unordered, values);
  // Ten Add(1) calls over two actors: each result is one actor's running total.
  auto add = [](const Handle& actor, int v) { return actor.Task(&Counter::Add).Remote(v); };
  for (int i = 0; i < 10; ++i) pool.Submit(add, 1);
  int from_low = 0, from_high = 0;
  while (pool.HasNext()) {
    const int total = pool.GetNext();
    (total >= 1000 ? from_high : from_low) += 1;
  }
  EXPECT_EQ(from_low + from_high, 10);
  EXPECT_EQ(*troupe::Get(low.Task(&Counter::Get).Remote()) +
                *troupe::Get(high.Task(&Counter::Get).Remote()),
            1010);
  ASSERT_TRUE(pool.HasFree());
  std::optional<Handle> taken = pool.PopIdle();
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(pool.Map(echo, std::vector<int>{7, 8}), (std::vector<int>{7, 8}));  // one actor left
  pool.Push(*taken);
  EXPECT_THROW(pool.GetNext(), troupe::InvalidArgumentError);  // nothing submitted

  troupe::util::Queue<std::string> queue(/*maxsize=*/2);
  queue.Put("a");
  queue.Put("b");
  EXPECT_TRUE(queue.Full());
  EXPECT_THROW(queue.PutNowait("c"), troupe::util::QueueFullError);
  EXPECT_THROW(queue.Put("c", std::chrono::milliseconds(300)), troupe::util::QueueFullError);
  EXPECT_EQ(queue.Size(), 2);
  // A task takes three: the driver's third Put waits for room, the task's third Get for it.
  auto taken_by_task = troupe::Task(TakeThree).Remote(queue);
  queue.Put("c", std::chrono::seconds(60));
  EXPECT_EQ(*troupe::Get(taken_by_task), "abc");
  EXPECT_TRUE(queue.Empty());
  EXPECT_THROW(queue.GetNowait(), troupe::util::QueueEmptyError);
  EXPECT_THROW(queue.Get(std::chrono::milliseconds(300)), troupe::util::QueueEmptyError);
  queue.Put("d");
  EXPECT_EQ(queue.Get(), "d");
  queue.Shutdown();
}

TEST(ActorsTest, KillWithAndWithoutRestart) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create).SetMaxRestarts(1).Remote(7);
  const int first_pid = *troupe::Get(counter.Task(&Counter::Pid).Remote());
  counter.Kill(/*no_restart=*/false);
  // The restarted instance starts from its constructor again.
  int value = -1;
  EXPECT_TRUE(WaitUntil(
      [&] {
        try {
          value = *troupe::Get(counter.Task(&Counter::Get).Remote());
        } catch (const troupe::ActorDiedError&) {
        }
        return value == 7;
      },
      absl::Seconds(10), "the restarted actor to answer with its initial value"))
      << "last value " << value;
  EXPECT_NE(*troupe::Get(counter.Task(&Counter::Pid).Remote()), first_pid);
  EXPECT_TRUE(*troupe::Get(counter.Task(&Counter::Restarted).Remote()));
  counter.Kill();
  const std::string killed = DeathOf(counter);
  EXPECT_TRUE(absl::StrContains(killed, "killed by troupe::Kill"))
      << (killed.empty() ? "calls to a killed actor must fail" : killed);
}

// A call queued behind a long one is dropped (TaskCancelledError at once, while the long one
// still runs); the long one sees IsCancelled and returns early (else Get would wait 120 s);
// later calls run, in order, on the same instance.
TEST(ActorsTest, CancelDropsAQueuedCallAndFlagsTheRunningOne) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create).Remote(0);
  const int pid = *troupe::Get(counter.Task(&Counter::Pid).Remote());
  auto running = counter.Task(&Counter::PollUntilCancelled).Remote();
  auto queued = counter.Task(&Counter::Add).Remote(1);
  auto later = counter.Task(&Counter::Add).Remote(10);
  troupe::Cancel(queued);
  EXPECT_THROW(troupe::Get(queued, std::chrono::seconds(60)), troupe::TaskCancelledError);
  EXPECT_FALSE(
      troupe::Wait(std::vector<troupe::ObjectRef<int>>{running}, 1, std::chrono::milliseconds(0))
          .unready.empty())
      << "the long call ended before it was cancelled";
  troupe::Cancel(running);
  EXPECT_THROW(troupe::Get(running, std::chrono::seconds(60)), troupe::TaskCancelledError);
  EXPECT_EQ(*troupe::Get(later), 10);  // Add(1) never ran
  EXPECT_TRUE(*troupe::Get(counter.Task(&Counter::SawCancel).Remote()));
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Pid).Remote()), pid);  // the same process
  troupe::Cancel(later);                                               // finished: nothing happens
  EXPECT_EQ(*troupe::Get(later), 10);
}

// force on an actor call kills the actor as Kill does: the call fails as cancelled and the
// actor restarts (max_restarts 1), from its constructor.
TEST(ActorsTest, ForceCancelKillsAndRestartsTheActor) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create).SetMaxRestarts(1).Remote(7);
  const int first_pid = *troupe::Get(counter.Task(&Counter::Pid).Remote());
  auto blocked = counter.Task(&Counter::Block).Remote();
  troupe::Cancel(blocked, /*force=*/true);
  EXPECT_THROW(troupe::Get(blocked, std::chrono::seconds(60)), troupe::TaskCancelledError);
  bool restarted = false;
  ASSERT_TRUE(WaitUntil(
      [&] {
        try {
          restarted = *troupe::Get(counter.Task(&Counter::Restarted).Remote(),
                                   std::chrono::seconds(10));
        } catch (const troupe::ActorDiedError&) {
        } catch (const troupe::GetTimeoutError&) {  // still blocked: not killed
        }
        return restarted;
      },
      absl::Seconds(30), "the actor to restart"));
  EXPECT_NE(*troupe::Get(counter.Task(&Counter::Pid).Remote()), first_pid);
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Get).Remote()), 7);
}

// An actor that submitted tasks is killed while idle: the CPUs its tasks' workers held come back,
// and the driver's next tasks run (they waited forever: bench/task_bench.cc, 2026-11-27).
TEST(ActorsTest, KilledActorsTaskLeasesComeBack) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  std::vector<troupe::ActorHandle<Counter>> clients;
  for (int c = 0; c < 2; ++c) {
    clients.push_back(troupe::Actor(Counter::Create).SetResources({{"CPU", 0}}).Remote(0));
  }
  for (auto& client : clients) {
    EXPECT_EQ(*troupe::Get(client.Task(&Counter::SubmitAndWait).Remote(200)), 200 * 201 / 2);
  }
  for (auto& client : clients) client.Kill();
  auto after = troupe::Task(Plus).Remote(20, 22);
  EXPECT_EQ(*troupe::Get(after, std::chrono::seconds(20)), 42)
      << "the killed actors' task leases never came back";
}

TEST(ActorsTest, CrashedActorRestartsAndResendsCallsInOrder) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create).SetMaxRestarts(2).SetMaxTaskRetries(-1).Remote(0);
  EXPECT_FALSE(*troupe::Get(counter.Task(&Counter::Restarted).Remote()));
  const int pid = *troupe::Get(counter.Task(&Counter::Pid).Remote());
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  // Calls made around the crash all reach the new instance, in order (at least once).
  std::vector<troupe::ObjectRef<int>> totals;
  for (int i = 0; i < 100; ++i) totals.push_back(counter.Task(&Counter::Add).Remote(1));
  auto values = troupe::Get(totals);
  for (int i = 1; i < 100; ++i) EXPECT_GT(*values[i], *values[i - 1]) << i;
  EXPECT_EQ(*values[99], 100);
  EXPECT_TRUE(*troupe::Get(counter.Task(&Counter::Restarted).Remote()));
}

TEST(ActorsTest, DeathCausesReachTheCaller) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto broken = troupe::Actor(Counter::Broken).Remote(0);
  try {
    troupe::Get(broken.Task(&Counter::Get).Remote());
    FAIL() << "expected ActorDiedError";
  } catch (const troupe::ActorDiedError& e) {
    EXPECT_TRUE(
        absl::StrContains(e.what(), "constructor threw std::invalid_argument: no counters today"))
        << e.what();
  }
  auto crashing = troupe::Actor(Counter::Create).Remote(0);
  const int pid = *troupe::Get(crashing.Task(&Counter::Pid).Remote());
  kill(pid, SIGKILL);
  const std::string crashed = DeathOf(crashing);
  EXPECT_TRUE(absl::StrContains(crashed, "was killed by signal 9"))
      << (crashed.empty() ? "expected ActorDiedError" : crashed);
  // `troupe status --actors` shows the dead with their causes.
  auto listing = cluster.Troupe({"status", "--actors"});
  EXPECT_EQ(listing.exit_code, 0) << listing.err;
  EXPECT_TRUE(absl::StrContains(listing.out, "constructor threw std::invalid_argument"))
      << listing.out;
  // The class's name, not its factory's (Counter::Create).
  EXPECT_TRUE(absl::StrContains(listing.out, " Counter ")) << listing.out;
  EXPECT_FALSE(absl::StrContains(listing.out, "Counter::Create")) << listing.out;
  auto leaving = troupe::Actor(Counter::Create).Remote(3);
  EXPECT_EQ(*troupe::Get(leaving.Task(&Counter::Leave).Remote()), 3);
  const std::string left = DeathOf(leaving);
  EXPECT_TRUE(absl::StrContains(left, "ExitActor"))
      << (left.empty() ? "expected ActorDiedError" : left);
}

// The GCS forgets dead actors beyond --max-dead-actors; a handle that reaches a process after
// that (here: a task given the handle) still learns the actor is dead, instead of waiting for it.
TEST(ActorsTest, ForgottenDeadActorIsDeadToLateCallers) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=2", "--max-dead-actors=1"}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create).Remote(1);
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Add).Remote(1)), 2);
  counter.Kill();
  // The only dead actor: remembered, with its cause.
  const std::string death = DeathOf(counter);
  EXPECT_TRUE(absl::StrContains(death, "killed by troupe::Kill")) << death;
  // A second death pushes the first out of the GCS's memory.
  auto other = troupe::Actor(Counter::Create).Remote(1);
  other.Kill();
  EXPECT_TRUE(WaitUntil(
      [&] {
        auto all = cluster.gcs().GetAllActorInfo();  // both, until the first is forgotten
        return all.ok() && all->size() == 1;
      },
      absl::Seconds(10), "the GCS to forget the first dead actor"));
  try {
    troupe::Get(troupe::Task(AddThroughHandle).Remote(counter, 5), std::chrono::seconds(30));
    FAIL() << "a call through the forgotten actor's handle must fail";
  } catch (const troupe::TaskError& e) {  // the task's call threw ActorDiedError
    EXPECT_TRUE(absl::StrContains(e.what(), "no record of actor")) << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), "--max-dead-actors")) << e.what();
  }
}

// Regression: calls that reached an actor after it called ExitActor were never answered, which
// kept its process (stuck in gRPC server shutdown) and the actor "alive" until callers gave up
// with "unreachable". Now every such call fails with the real cause.
TEST(ActorsTest, CallsInFlightWhenAnActorExitsFailWithTheExitCause) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  for (int round = 0; round < 3; ++round) {
    auto leaving = troupe::Actor(Counter::Create).Remote(round);
    auto left = leaving.Task(&Counter::Leave).Remote();
    std::vector<troupe::ObjectRef<int>> behind;  // pipelined right behind the exit
    for (int i = 0; i < 200; ++i) behind.push_back(leaving.Task(&Counter::Add).Remote(1));
    EXPECT_EQ(*troupe::Get(left), round);
    for (auto& call : behind) {
      try {
        troupe::Get(call);
      } catch (const troupe::ActorDiedError& e) {
        ASSERT_TRUE(absl::StrContains(e.what(), "ExitActor")) << e.what();
      }
    }
  }
}

TEST(ActorsTest, OutOfMemoryIsTheCauseWhenTheMonitorKillsTheActor) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  // A node whose threshold is always exceeded: its newest worker is killed for memory.
  ASSERT_OK_AND_ASSIGN(std::string tight,
                       cluster.AddWorker({"--num-cpus=1", "--memory-usage-threshold=0.001",
                                          R"(--resources={"tight": 1})"}));
  Driver driver(cluster);
  auto actor = troupe::Actor(Counter::Create).SetResources({{"tight", 1}}).Remote(0);
  const std::string cause = DeathOf(actor, absl::Seconds(30));
  EXPECT_TRUE(absl::StrContains(cause, "ran out of memory"))
      << (cause.empty() ? "the memory monitor should have killed the actor" : cause);
}

TEST(ActorsTest, FractionalGpuActorsPackOntoDevices) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=4", "--num-gpus=2"}));
  Driver driver(cluster);
  std::vector<troupe::ActorHandle<Counter>> actors;
  for (int i = 0; i < 4; ++i) {
    actors.push_back(troupe::Actor(Counter::Create).SetResources({{"GPU", 0.5}}).Remote(i));
  }
  std::multiset<std::string> devices;
  for (auto& actor : actors) devices.insert(*troupe::Get(actor.Task(&Counter::Devices).Remote()));
  // Default --gpu-visibility=all: every GPU stays visible (NCCL can reach peer devices); each
  // actor learns its own from GetGpuIds().
  EXPECT_EQ(devices,
            (std::multiset<std::string>{"0|<unset>", "0|<unset>", "1|<unset>", "1|<unset>"}));
  // A fifth does not fit: it waits (no GPU share left). The 1 s is the behaviour under test
  // (still pending after a while), not a wait for something.
  auto extra = troupe::Actor(Counter::Create).SetResources({{"GPU", 0.5}}).Remote(9);
  auto pending =
      troupe::Wait(std::vector<troupe::ObjectRef<int>>{extra.Task(&Counter::Get).Remote()}, 1,
                   std::chrono::milliseconds(1000));
  EXPECT_TRUE(pending.ready.empty());
  actors[0].Kill();  // frees half a GPU
  EXPECT_EQ(*troupe::Get(extra.Task(&Counter::Get).Remote(), std::chrono::seconds(20)), 9);
}

TEST(ActorsTest, AssignedGpuVisibilityMasksCudaVisibleDevices) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK(cluster.AddWorker({"--num-cpus=4", "--num-gpus=3", "--gpu-visibility=assigned"}));
  Driver driver(cluster);
  auto one = troupe::Actor(Counter::Create).SetResources({{"GPU", 1}}).Remote(0);
  auto two = troupe::Actor(Counter::Create).SetResources({{"GPU", 2}}).Remote(0);
  std::multiset<std::string> devices = {*troupe::Get(one.Task(&Counter::Devices).Remote()),
                                        *troupe::Get(two.Task(&Counter::Devices).Remote())};
  // Each sees only its own GPUs; which ones depends on placement order.
  EXPECT_TRUE(devices == (std::multiset<std::string>{"0|0", "1,2|1,2"}) ||
              devices == (std::multiset<std::string>{"2|2", "0,1|0,1"}))
      << *devices.begin() << " " << *devices.rbegin();
  auto bad =
      cluster.Troupe({"start", "--address=" + cluster.gcs_address(), "--gpu-visibility=some"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(bad.err, "--gpu-visibility must be 'all' or 'assigned'"))
      << bad.err;
}

TEST(ActorsTest, ActorMovesWhenItsNodeDies) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=1"}));
  ASSERT_OK_AND_ASSIGN(std::string doomed,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"slot": 1})"}));
  ASSERT_OK_AND_ASSIGN(std::string survivor,
                       cluster.AddWorker({"--num-cpus=1", R"(--resources={"slot": 1})"}));
  Driver driver(cluster);
  auto counter = troupe::Actor(Counter::Create)
                     .SetResources({{"slot", 1}})
                     .SetSchedulingStrategy(troupe::NodeAffinity{doomed, /*soft=*/true})
                     .SetMaxRestarts(1)
                     .Remote(5);
  ASSERT_EQ(*troupe::Get(counter.Task(&Counter::Node).Remote()), doomed);
  const int raylet_pid = troupe::testing::FindNode(cluster.Status(), doomed)["raylet_pid"];
  ASSERT_EQ(kill(raylet_pid, SIGKILL), 0);
  std::string node;
  EXPECT_TRUE(WaitUntil(
      [&] {
        try {
          node = *troupe::Get(counter.Task(&Counter::Node).Remote(), std::chrono::seconds(10));
        } catch (const troupe::ActorDiedError&) {
        }
        return node == survivor;
      },
      absl::Seconds(60), "the actor to restart on the surviving node", absl::Milliseconds(100)))
      << "last answered from node " << node;
}

// Heavy parallel load: many threads call several concurrent actors while other actors are created
// and killed; every call must succeed with its own answer. A transient transport error on a live
// actor used to make every call to it wait 30 s and then fail with "unreachable while the GCS
// reports it alive"; that trigger is rare here, so CallsResentAfterLostRepliesRunExactlyOnceInOrder
// injects it on purpose (it fails on the old code the same way).
TEST(ActorsTest, ParallelCallersToConcurrentActorsWhileOthersComeAndGo) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=8"}));
  Driver driver(cluster);
  std::vector<troupe::ActorHandle<Counter>> actors;
  for (int i = 0; i < 3; ++i) {
    actors.push_back(troupe::Actor(Counter::Create).SetMaxConcurrency(4).Remote(i));
  }
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (int i = 0; i < 30 && !stop; ++i) {
      auto doomed = troupe::Actor(Counter::Create).Remote(i);
      (void)troupe::Get(doomed.Task(&Counter::Get).Remote());
      doomed.Kill();
    }
  });
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  std::mutex errors_mu;
  std::vector<std::string> errors;
  for (int t = 0; t < 6; ++t) {
    callers.emplace_back([&, t] {
      for (int round = 0; round < 30; ++round) {
        auto& actor = actors[(t + round) % actors.size()];
        std::vector<troupe::ObjectRef<int>> echoes;
        for (int i = 0; i < 100; ++i) echoes.push_back(actor.Task(&Counter::Echo).Remote(i));
        try {
          auto values = troupe::Get(echoes, std::chrono::seconds(60));
          for (int i = 0; i < 100; ++i) wrong += *values[i] != i;
        } catch (const troupe::TroupeError& e) {
          std::lock_guard<std::mutex> lock(errors_mu);
          errors.push_back(e.what());
          return;
        }
      }
    });
  }
  for (auto& caller : callers) caller.join();
  stop = true;
  churn.join();
  EXPECT_EQ(wrong, 0);
  EXPECT_TRUE(errors.empty()) << errors.size() << " callers failed; first: " << errors[0];
}

// Actor calls resent after a transport error run exactly once per incarnation, in order: this
// driver drops 30% of actor replies after the actor ran the call (the test-only fault injection
// in its gRPC push client), so many calls are resent to the same actor, which must answer them
// from its reply cache instead of running them again.
TEST(ActorsTest, CallsResentAfterLostRepliesRunExactlyOnceInOrder) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  ASSERT_EQ(setenv("TROUPE_TESTING_DROP_ACTOR_REPLIES", "0.3", 1), 0);
  Driver driver(cluster);  // reads it once, in Init
  ASSERT_EQ(unsetenv("TROUPE_TESTING_DROP_ACTOR_REPLIES"), 0);
  // At-most-once across restarts, yet no call fails: within one incarnation resends are safe.
  auto counter = troupe::Actor(Counter::Create).SetMaxTaskRetries(0).Remote(0);
  constexpr int kThreads = 4;
  constexpr int kCallsPerThread = 250;
  std::vector<std::vector<int>> totals(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      try {
        for (int batch = 0; batch < 5; ++batch) {
          std::vector<troupe::ObjectRef<int>> calls;
          for (int i = 0; i < kCallsPerThread / 5; ++i) {
            calls.push_back(counter.Task(&Counter::Add).Remote(1));
          }
          for (auto& value : troupe::Get(calls, std::chrono::seconds(60))) {
            totals[t].push_back(*value);
          }
        }
      } catch (const troupe::TroupeError& e) {
        errors[t] = e.what();
      }
    });
  }
  for (auto& caller : callers) caller.join();
  std::set<int> seen;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(errors[t], "") << "thread " << t;
    ASSERT_EQ(totals[t].size(), static_cast<size_t>(kCallsPerThread));
    for (size_t i = 1; i < totals[t].size(); ++i) {
      ASSERT_LT(totals[t][i - 1], totals[t][i])
          << "thread " << t << ": call " << i << " ran before an earlier one";
    }
    seen.insert(totals[t].begin(), totals[t].end());
  }
  // Each Add(1) ran once: every total from 1 to N exactly once, and the counter is N.
  constexpr int kCalls = kThreads * kCallsPerThread;
  EXPECT_EQ(seen.size(), static_cast<size_t>(kCalls)) << "a call ran twice or not at all";
  EXPECT_EQ(*seen.begin(), 1);
  EXPECT_EQ(*seen.rbegin(), kCalls);
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::Get).Remote()), kCalls);
}

}  // namespace

// Regression (issue 34 item 8): remote functions and actor methods taking `T&` did not compile.
// Each call gets its own copy of the argument (the caller's value never changes). And an actor
// call takes a name, which `troupe list tasks` shows, as a task's SetName now does too.
TEST(ActorsTest, NonConstReferenceParametersAndNamedCalls) {
  ASSERT_OK_AND_ASSIGN(
      TestCluster cluster,
      TestCluster::Start(
          {"--num-cpus=2", absl::StrCat("--http-port=", troupe::testing::PickFreePort())}));
  Driver driver(cluster);
  std::vector<int> values = {1, 2, 3};
  EXPECT_EQ(*troupe::Get(troupe::Task(AppendAndSum).SetName("sum-it").Remote(values, 4)), 10);
  auto counter = troupe::Actor(Counter::Create).Remote(100);
  // 100 + 6 = 106, plus the size of its copy once 106 was appended (4).
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::AddAll).SetName("restock").Remote(values)), 110);
  EXPECT_EQ(*troupe::Get(counter.Task(&Counter::AddAll).Remote(troupe::Put(values))), 116);
  EXPECT_EQ(values, (std::vector<int>{1, 2, 3}));

  CommandResult last;
  auto rows_named = [&](const std::string& name) {
    CommandResult r =
        cluster.Troupe({"list", "tasks", "--filter", "name=" + name, "--format", "json", "--limit",
                        "0", "--address=" + cluster.HttpAddress(), "--token=" + cluster.token()});
    nlohmann::json rows = nlohmann::json::parse(r.out, nullptr, false);
    last = r;
    return rows.is_array() ? rows : nlohmann::json::array();
  };
  nlohmann::json restock, sum_it;
  EXPECT_TRUE(WaitUntil(
      [&] {
        restock = rows_named("restock");
        sum_it = rows_named("sum-it");
        return restock.size() == 1 && sum_it.size() == 1;
      },
      absl::Seconds(20), "the named task and actor call in `troupe list tasks`"))
      << restock.dump() << sum_it.dump() << "\n"
      << last.out << last.err;
  if (restock.size() == 1) {
    EXPECT_EQ(restock[0].value("type", ""), "ACTOR_TASK") << restock.dump();
    EXPECT_EQ(restock[0].value("actor_id", ""), counter.ID()) << restock.dump();
  }
  if (sum_it.size() == 1) {
    EXPECT_EQ(sum_it[0].value("type", ""), "NORMAL_TASK") << sum_it.dump();
  }
  // Unnamed calls keep the method's name.
  EXPECT_EQ(rows_named("Counter::AddAll").size(), 1u);
}

// troupe::GetRuntimeContext() in the driver, a task, an actor (before and after a restart) and a
// placement group; Nodes(), ClusterResources() and AvailableResources() against what the head
// was started with.
TEST(ActorsTest, RuntimeContextAndClusterResources) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster,
                       TestCluster::Start({"--num-cpus=4", "--resources={\"widget\": 3}"}));
  Driver driver(cluster, "shop");
  const troupe::RuntimeContext in_driver = troupe::GetRuntimeContext();
  EXPECT_TRUE(in_driver.IsDriver());
  EXPECT_FALSE(in_driver.IsActor());
  EXPECT_EQ(in_driver.namespace_name, "shop");
  EXPECT_EQ(in_driver.job_id.size(), 8u) << in_driver.job_id;
  EXPECT_TRUE(in_driver.assigned_resources.empty());

  const std::vector<troupe::NodeInfo> nodes = troupe::Nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_TRUE(nodes[0].alive);
  EXPECT_TRUE(nodes[0].is_head);
  EXPECT_EQ(nodes[0].node_id, in_driver.node_id);
  EXPECT_EQ(nodes[0].total_resources.at("CPU"), 4);
  const std::map<std::string, double> total = troupe::ClusterResources();
  EXPECT_EQ(total.at("CPU"), 4);
  EXPECT_EQ(total.at("widget"), 3);

  auto task =
      troupe::Get(troupe::Task(ContextOfTask).SetResources({{"CPU", 1}, {"widget", 2}}).Remote());
  EXPECT_EQ(task->at("job"), in_driver.job_id);
  EXPECT_EQ(task->at("node"), in_driver.node_id);
  EXPECT_EQ(task->at("task").size(), 32u) << task->at("task");
  EXPECT_EQ(task->at("actor"), "");
  EXPECT_EQ(task->at("namespace"), "shop");
  EXPECT_EQ(task->at("resources"), "CPU=1.000000,widget=2.000000");
  EXPECT_EQ(task->at("placement_group"), "");
  EXPECT_EQ(task->at("bundle"), "-1");

  auto counter =
      troupe::Actor(Counter::Create).SetResources({{"widget", 1}}).SetMaxRestarts(1).Remote(0);
  auto first = troupe::Get(counter.Task(&Counter::Context).Remote());
  auto second = troupe::Get(counter.Task(&Counter::Context).Remote());
  EXPECT_EQ(first->at("actor"), counter.ID());
  EXPECT_EQ(first->at("resources"), "widget=1.000000");
  EXPECT_EQ(first->at("restarted"), "no");
  EXPECT_NE(first->at("task"), second->at("task")) << "each call is its own task";
  EXPECT_NE(first->at("task"), task->at("task"));
  // The actor holds a widget: the free count drops to 2 once the node reports it.
  std::map<std::string, double> available;
  EXPECT_TRUE(WaitUntil(
      [&] {
        available = troupe::AvailableResources();
        return available["widget"] == 2;
      },
      absl::Seconds(10), "AvailableResources to show the actor's widget in use"))
      << available["widget"];

  counter.Kill(/*no_restart=*/false);
  std::shared_ptr<std::map<std::string, std::string>> restarted;
  EXPECT_TRUE(WaitUntil(
      [&] {
        try {
          restarted = troupe::Get(counter.Task(&Counter::Context).Remote());
        } catch (const troupe::ActorDiedError&) {
        }
        return restarted != nullptr;
      },
      absl::Seconds(20), "the restarted actor to answer"));
  if (restarted) {
    EXPECT_EQ(restarted->at("restarted"), "yes");
    EXPECT_EQ(restarted->at("actor"), counter.ID());
  }

  // In a placement group: a task in bundle 1, and an actor asking for any bundle (the context
  // names the bundle it got).
  auto group = troupe::CreatePlacementGroup({"", {{{"CPU", 1}}, {{"CPU", 1}}}});
  ASSERT_TRUE(group.Wait(std::chrono::seconds(20)));
  auto in_group = troupe::Get(troupe::Task(ContextOfTask).SetPlacementGroup(group, 1).Remote());
  EXPECT_EQ(in_group->at("placement_group"), group.ID());
  EXPECT_EQ(in_group->at("bundle"), "1");
  auto grouped =
      troupe::Actor(Counter::Create).SetResources({{"CPU", 1}}).SetPlacementGroup(group).Remote(0);
  auto actor_in_group = troupe::Get(grouped.Task(&Counter::Context).Remote());
  EXPECT_EQ(actor_in_group->at("placement_group"), group.ID());
  EXPECT_TRUE(actor_in_group->at("bundle") == "0" || actor_in_group->at("bundle") == "1")
      << actor_in_group->at("bundle");
  EXPECT_EQ(actor_in_group->at("resources"), "CPU=1.000000");
}

int main(int argc, char** argv) {
  if (std::getenv("TROUPE_WORKER_MODE") != nullptr) troupe::Init(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
