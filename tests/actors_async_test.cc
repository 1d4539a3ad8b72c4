// Async actors (troupe/async.h: C++20 coroutines) and concurrency groups on real clusters. Part
// of the actors_test binary (its main is in actors_test.cc), which is compiled as C++20 and
// linked with Troupe's C++17 library: the test that mixing the two works.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/status_testing.h"
#include "src/common/wait_until.h"
#include "tests/driver.h"
#include "tests/test_cluster.h"
#include "troupe/api.h"
#include "troupe/async.h"

namespace {

// A latch: Wait blocks (a thread of its own) until Open, then returns 7.
class Latch {
 public:
  static Latch* Create() { return new Latch(); }
  int Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(120), [&] { return open_; });
    return open_ ? 7 : -1;
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

int BrokenTask(int x) { throw std::out_of_range("task " + std::to_string(x) + " failed"); }

// An async actor: its coroutine methods run on one thread, many calls at once. It counts the
// calls in flight inside it and the threads they ran on.
class Relay {
 public:
  static Relay* Create() { return new Relay(); }
  // Waits for `gate` (an ObjectRef this actor borrows) without blocking the thread.
  troupe::Async<int> Forward(troupe::ObjectRef<int> gate) {
    threads_.insert(std::this_thread::get_id());
    max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
    int value = co_await gate;
    threads_.insert(std::this_thread::get_id());  // resumed: on the same thread
    --in_flight_;
    co_return value + 1;
  }
  // Waits for a call to another actor (an ObjectRef this actor owns); records a cancel.
  troupe::Async<int> AskLatch(troupe::ActorHandle<Latch> latch) {
    ++asking_;
    try {
      int value = co_await latch.Task(&Latch::Wait).Remote();
      --asking_;
      co_return value;
    } catch (const troupe::TaskCancelledError&) {
      --asking_;
      saw_cancel_ = true;
      throw;
    }
  }
  int Asking() { return asking_; }
  // Throws at once, after a wait, or awaits a failed task: the caller gets TaskError.
  troupe::Async<int> Fail(int when) {
    if (when == 0) throw std::invalid_argument("failed before any wait");
    co_await troupe::SleepFor(std::chrono::milliseconds(1));
    if (when == 1) throw std::invalid_argument("failed after a wait");
    co_return co_await troupe::Task(BrokenTask).Remote(3);
  }
  // co_await on a helper coroutine of the actor.
  troupe::Async<int> Twice(int x) { co_return 2 * co_await Half(4 * x); }
  int MaxInFlight() { return max_in_flight_; }
  int Threads() { return static_cast<int>(threads_.size()); }
  bool SawCancel() { return saw_cancel_; }

 private:
  troupe::Async<int> Half(int x) {
    co_await troupe::SleepFor(std::chrono::milliseconds(1));
    co_return x / 2;
  }
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  int asking_ = 0;
  std::set<std::thread::id> threads_;
  bool saw_cancel_ = false;
};

// A threaded actor with a concurrency group: "io" has two threads of its own, the default group
// one. Meet returns 1 once two calls are inside it at the same time (0 after 60 s alone).
class Meeting {
 public:
  static Meeting* Create() { return new Meeting(); }
  int Meet() {
    std::unique_lock<std::mutex> lock(mu_);
    ++inside_;
    cv_.notify_all();
    const bool met = cv_.wait_for(lock, std::chrono::seconds(60), [&] { return inside_ >= 2; });
    return met ? 1 : 0;
  }
  int Ping() { return 1; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int inside_ = 0;
};
TROUPE_CONCURRENCY_GROUP(&Meeting::Meet, "io");
// Its own group: it answers while the default group is full (1,000 calls in flight).
TROUPE_CONCURRENCY_GROUP(&Relay::MaxInFlight, "control");

TROUPE_REMOTE(Latch::Create, &Latch::Wait, &Latch::Open, Relay::Create, &Relay::Forward,
              &Relay::AskLatch, &Relay::Fail, &Relay::Twice, &Relay::MaxInFlight, &Relay::Threads,
              &Relay::SawCancel, &Relay::Asking, Meeting::Create, &Meeting::Meet, &Meeting::Ping,
              BrokenTask);

using troupe::testing::Driver;
using troupe::testing::TestCluster;
using troupe::testing::WaitUntil;

// Async actors: 1,000 calls (the default limit) wait at once on one thread for an object that
// is not ready (the count inside the actor reaches 1,000 before the gate opens: no timing), then
// all finish.
TEST(ActorsTest, AsyncActorRunsManyWaitingCallsOnOneThread) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=4"}));
  Driver driver(cluster);
  auto latch = troupe::Actor(Latch::Create).SetMaxConcurrency(2).Remote();
  // The default group's limit is 1,000 calls in flight; MaxInFlight runs in "control".
  auto relay = troupe::Actor(Relay::Create).SetConcurrencyGroups({{"control", 1}}).Remote();
  auto gate = latch.Task(&Latch::Wait).Remote();  // ready once the latch opens
  constexpr int kCalls = 1000;
  std::vector<troupe::ObjectRef<int>> results;
  for (int i = 0; i < kCalls; ++i) results.push_back(relay.Task(&Relay::Forward).Remote(gate));
  int in_flight = 0;
  EXPECT_TRUE(WaitUntil(
      [&] {
        in_flight = *troupe::Get(relay.Task(&Relay::MaxInFlight).Remote());
        return in_flight == kCalls;
      },
      absl::Seconds(60), "every call to be waiting inside the actor at once"))
      << in_flight << " of " << kCalls << " calls were in flight at once";
  troupe::Get(latch.Task(&Latch::Open).Remote(), std::chrono::seconds(60));
  for (const auto& value : troupe::Get(results)) EXPECT_EQ(*value, 8);
  EXPECT_EQ(*troupe::Get(relay.Task(&Relay::Threads).Remote()), 1);
  // co_await on a helper coroutine.
  EXPECT_EQ(*troupe::Get(relay.Task(&Relay::Twice).Remote(5)), 20);
}

// An exception that leaves a coroutine reaches the caller as from any method: thrown before a
// wait, after one, or coming from an awaited task.
TEST(ActorsTest, AsyncActorExceptionsAndCancelReachTheCaller) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=4"}));
  Driver driver(cluster);
  auto relay = troupe::Actor(Relay::Create).Remote();
  const std::vector<std::string> expected = {"failed before any wait", "failed after a wait",
                                             "task 3 failed"};
  for (int when = 0; when < 3; ++when) {
    try {
      troupe::Get(relay.Task(&Relay::Fail).Remote(when));
      ADD_FAILURE() << "Fail(" << when << ") must throw";
    } catch (const troupe::TaskError& e) {
      EXPECT_TRUE(absl::StrContains(e.what(), expected[when])) << e.what();
    }
  }
  // Cancel reaches a call waiting in a co_await: it resumes with TaskCancelledError (which it
  // sees, and rethrows), the caller gets TaskCancelledError, and the actor goes on.
  auto latch = troupe::Actor(Latch::Create).SetMaxConcurrency(2).Remote();
  auto waiting = relay.Task(&Relay::AskLatch).Remote(latch);
  EXPECT_TRUE(WaitUntil([&] { return *troupe::Get(relay.Task(&Relay::Asking).Remote()) == 1; },
                        absl::Seconds(30), "the call to wait in its co_await"));
  troupe::Cancel(waiting);
  EXPECT_THROW(troupe::Get(waiting, std::chrono::seconds(60)), troupe::TaskCancelledError);
  EXPECT_TRUE(*troupe::Get(relay.Task(&Relay::SawCancel).Remote()));
  troupe::Get(latch.Task(&Latch::Open).Remote(), std::chrono::seconds(60));
  EXPECT_EQ(*troupe::Get(relay.Task(&Relay::AskLatch).Remote(latch)), 7);
}

// Concurrency groups of a threaded actor: "io" (by registration, or named by the call) has two
// threads of its own, so two Meet calls meet while the default group has one thread; a group
// the actor lacks is refused with the group's name.
TEST(ActorsTest, ConcurrencyGroupsRunOnTheirOwnThreads) {
  ASSERT_OK_AND_ASSIGN(TestCluster cluster, TestCluster::Start({"--num-cpus=2"}));
  Driver driver(cluster);
  auto meeting = troupe::Actor(Meeting::Create).SetConcurrencyGroups({{"io", 2}}).Remote();
  auto first = meeting.Task(&Meeting::Meet).Remote();  // TROUPE_CONCURRENCY_GROUP: io
  auto second = meeting.Task(&Meeting::Meet).SetConcurrencyGroup("io").Remote();
  EXPECT_EQ(*troupe::Get(first), 1);
  EXPECT_EQ(*troupe::Get(second), 1);
  try {
    troupe::Get(meeting.Task(&Meeting::Ping).SetConcurrencyGroup("gpu").Remote());
    ADD_FAILURE() << "a call in a group the actor lacks must fail";
  } catch (const troupe::TaskError& e) {
    EXPECT_TRUE(absl::StrContains(e.what(), "concurrency group \"gpu\"")) << e.what();
    EXPECT_TRUE(absl::StrContains(e.what(), "SetConcurrencyGroups")) << e.what();
  }
  EXPECT_EQ(*troupe::Get(meeting.Task(&Meeting::Ping).Remote()), 1);  // the actor goes on
  EXPECT_THROW(troupe::Actor(Meeting::Create).SetConcurrencyGroups({{"io", 0}}),
               troupe::InvalidArgumentError);
}

}  // namespace
