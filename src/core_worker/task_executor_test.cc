#include "src/core_worker/task_executor.h"

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace troupe {
namespace {

// Pushes tasks into a TaskExecutor and runs them on the test thread (RunNext): no gRPC, no
// threads, so the order is exact.
class TaskExecutorTest : public ::testing::Test {
 protected:
  TaskExecutorTest()
      : executor_([this](const rpc::PushTaskRequest& request) {
          ran_.push_back(request.task().function_name());
          if (while_running_) while_running_();
          rpc::PushTaskReply reply;
          reply.add_returns()->set_is_application_error(request.task().function_name() == "bad");
          // Which run this was: a resend answered from the cache shows the first run's number.
          reply.mutable_returns(0)->set_inline_value("run" + std::to_string(ran_.size()));
          return reply;
        }) {}

  // An actor call from `caller` with sequence number `seq`; the caller's first unanswered
  // call is `first_unanswered`.
  void PushCall(const std::string& caller, int64_t seq, int64_t first_unanswered = 0) {
    rpc::PushTaskRequest& request = requests_.emplace_back();
    rpc::TaskSpec* spec = request.mutable_task();
    spec->set_type(rpc::TaskSpec::ACTOR_TASK);
    spec->set_function_name(caller + std::to_string(seq));
    spec->set_caller_worker_id(caller);
    spec->set_sequence_number(seq);
    spec->set_caller_first_unanswered(first_unanswered);
    Push(&request);
  }
  void PushTask(const std::string& name, rpc::TaskSpec::Type type = rpc::TaskSpec::NORMAL_TASK) {
    rpc::PushTaskRequest& request = requests_.emplace_back();
    request.mutable_task()->set_type(type);
    request.mutable_task()->set_function_name(name);
    request.mutable_task()->set_max_concurrency(1);
    if (type == rpc::TaskSpec::ACTOR_CREATION_TASK) {
      request.mutable_task()->set_actor_id(ActorId::FromRandom().Binary());
    }
    Push(&request);
  }
  // A normal task of lease `lease`, at `seq` in its order.
  void PushLeased(const std::string& name, const std::string& lease, int64_t seq) {
    rpc::PushTaskRequest& request = requests_.emplace_back();
    request.mutable_task()->set_type(rpc::TaskSpec::NORMAL_TASK);
    request.mutable_task()->set_function_name(name);
    request.set_lease_id(lease);
    request.set_lease_sequence(seq);
    Push(&request);
  }
  void Push(const rpc::PushTaskRequest* request) { Push(executor_, request); }
  void Push(TaskExecutor& executor, const rpc::PushTaskRequest* request) {
    executor.Enqueue(request, [this, name = request->task().function_name()](
                                  absl::StatusOr<rpc::PushTaskReply> reply) {
      answers_.push_back(name + (reply.ok() ? ":ok" : ":" + std::string(reply.status().message())));
      values_.push_back(reply.ok() ? reply->returns(0).inline_value()
                                   : absl::StatusCodeToString(reply.status().code()));
      if (reply.ok()) run_us_.push_back(reply->run_us());
    });
  }
  void RunAll() {
    while (executor_.RunNext()) {
    }
  }

  std::deque<rpc::PushTaskRequest> requests_;  // stable addresses, alive until answered
  std::vector<std::string> ran_;
  std::vector<std::string> answers_;
  std::vector<std::string> values_;      // per answer: the run it came from, or the error code
  std::vector<int64_t> run_us_;          // per answered run: the run time it reports
  std::function<void()> while_running_;  // runs inside each task
  TaskExecutor executor_;
};

TEST_F(TaskExecutorTest, RunsNormalTasksInArrivalOrderAndAnswersEach) {
  PushTask("a");
  PushTask("b");
  EXPECT_EQ(executor_.num_queued(), 2u);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(answers_, (std::vector<std::string>{"a:ok", "b:ok"}));
}

// Each reply says how long its task ran (the caller sizes its pipeline by it).
TEST_F(TaskExecutorTest, ReplyCarriesTheRunTime) {
  while_running_ = [] { absl::SleepFor(absl::Milliseconds(20)); };
  PushTask("slow");
  RunAll();
  ASSERT_EQ(run_us_.size(), 1u);
  EXPECT_GE(run_us_[0], 20000);
}

// Two calls in flight to a worker may reach its queue in either order: a lease's tasks still
// run in the order their caller pushed them, so a task never waits behind a later one whose
// result it needs.
TEST_F(TaskExecutorTest, LeasedTasksRunInTheirLeasesOrder) {
  PushLeased("second", "lease-a", 1);
  PushLeased("third", "lease-a", 2);
  EXPECT_FALSE(executor_.RunNext());  // both wait for the first
  PushLeased("first", "lease-a", 0);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"first", "second", "third"}));
  // A new lease (the worker was given back and leased again) starts its own order at 0; what the
  // old one still held runs too.
  PushLeased("old-late", "lease-a", 5);
  PushLeased("new-first", "lease-b", 0);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"first", "second", "third", "old-late", "new-first"}));
}

// A push whose earlier one never comes (its call failed on the way) waits only so long.
TEST_F(TaskExecutorTest, AHeldTaskRunsWhenItsPredecessorNeverComes) {
  TaskExecutor executor(
      [this](const rpc::PushTaskRequest& request) {
        ran_.push_back(request.task().function_name());
        rpc::PushTaskReply reply;
        reply.add_returns();
        return reply;
      },
      /*lease_order_hold=*/absl::Milliseconds(30));
  rpc::PushTaskRequest& request = requests_.emplace_back();
  request.mutable_task()->set_function_name("orphan");
  request.set_lease_id("lease-a");
  request.set_lease_sequence(3);
  Push(executor, &request);
  EXPECT_FALSE(executor.RunNext());
  absl::SleepFor(absl::Milliseconds(40));
  EXPECT_TRUE(executor.RunNext());
  EXPECT_EQ(ran_, std::vector<std::string>{"orphan"});
  EXPECT_EQ(answers_, std::vector<std::string>{"orphan:ok"});
}

// Pushes that claim the same place (a broken caller) all run and are answered.
TEST_F(TaskExecutorTest, LeasedTasksAtTheSamePlaceAllRun) {
  PushLeased("twin-a", "lease-a", 2);
  PushLeased("twin-b", "lease-a", 2);
  PushLeased("first", "lease-a", 0);
  PushLeased("second", "lease-a", 1);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"twin-b", "first", "second", "twin-a"}));
  EXPECT_EQ(answers_.size(), 4u);
}

// Shutting down answers held tasks too (the gRPC server's shutdown waits for every answer).
TEST_F(TaskExecutorTest, ShutdownAnswersHeldLeasedTasks) {
  PushLeased("held", "lease-a", 1);
  executor_.Shutdown();
  EXPECT_TRUE(ran_.empty());
  EXPECT_EQ(answers_, std::vector<std::string>{"held:the worker is exiting"});
}

TEST_F(TaskExecutorTest, EarlyActorCallsWaitForTheirTurn) {
  PushCall("c", 2);
  PushCall("c", 1);
  EXPECT_EQ(executor_.num_queued(), 0u);  // call 0 has not arrived: both are held
  RunAll();
  EXPECT_TRUE(ran_.empty());
  PushCall("c", 0);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c0", "c1", "c2"}));
}

TEST_F(TaskExecutorTest, OrderIsPerCaller) {
  PushCall("x", 1);  // held: x0 missing
  PushCall("y", 0);  // y's order is its own
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"y0"}));
  PushCall("y", 1);
  PushCall("x", 0);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"y0", "y1", "x0", "x1"}));
}

TEST_F(TaskExecutorTest, RestartedActorStartsAtTheCallersFirstUnansweredCall) {
  // A new instance of the actor: calls 0..4 were answered by the old one, so the caller says its
  // first unanswered call is 5 — the executor must not wait for 0..4.
  PushCall("c", 6, /*first_unanswered=*/5);
  PushCall("c", 5, /*first_unanswered=*/5);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c5", "c6"}));
}

TEST_F(TaskExecutorTest, DuplicateDeliveryRunsOnceAndAnswersTheCachedReply) {
  PushCall("c", 0);
  RunAll();
  PushCall("c", 0);                       // resent: the caller never saw the answer (a lost reply)
  EXPECT_EQ(executor_.num_queued(), 0u);  // answered at once, not queued
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c0"}));
  EXPECT_EQ(values_, (std::vector<std::string>{"run1", "run1"}));
  PushCall("c", 1);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c0", "c1"}));
}

TEST_F(TaskExecutorTest, ResendWhileTheCallRunsGetsTheSameReplyWhenItFinishes) {
  while_running_ = [this] {
    while_running_ = nullptr;
    PushCall("c", 0);  // the resend arrives while the first delivery runs
    EXPECT_TRUE(answers_.empty());
  };
  PushCall("c", 0);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c0"}));
  EXPECT_EQ(values_, (std::vector<std::string>{"run1", "run1"}));
}

TEST_F(TaskExecutorTest, ResendOfAnEarlyCallRunsItOnceInItsTurn) {
  PushCall("c", 1);
  PushCall("c", 1);  // resent while it still waits for call 0
  RunAll();
  EXPECT_TRUE(ran_.empty());
  PushCall("c", 0);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c0", "c1"}));
  EXPECT_EQ(values_, (std::vector<std::string>{"run1", "run2", "run2"}));
}

TEST_F(TaskExecutorTest, AcknowledgedRepliesAreDroppedAndNeverRunAgain) {
  for (int seq = 0; seq < 10; ++seq) PushCall("c", seq);
  RunAll();
  EXPECT_EQ(executor_.num_cached_replies(), 10u);
  // The caller has every reply below 8: only 8 and 9 stay (and 10 once it ran).
  PushCall("c", 10, /*first_unanswered=*/8);
  EXPECT_EQ(executor_.num_cached_replies(), 2u);
  RunAll();
  EXPECT_EQ(executor_.num_cached_replies(), 3u);
  PushCall("c", 11, /*first_unanswered=*/11);
  EXPECT_EQ(executor_.num_cached_replies(), 0u);
  RunAll();
  // A stray late copy of an acknowledged call is refused, not run.
  PushCall("c", 3, /*first_unanswered=*/11);
  RunAll();
  EXPECT_EQ(ran_.size(), 12u);
  EXPECT_EQ(values_.back(), "ABORTED");
  EXPECT_NE(answers_.back().find("not run again"), std::string::npos) << answers_.back();
  // Memory stays bounded by the calls in flight, however many calls went before.
  for (int seq = 12; seq < 1012; ++seq) {
    PushCall("c", seq, /*first_unanswered=*/seq);
    RunAll();
  }
  EXPECT_EQ(executor_.num_cached_replies(), 1u);
}

TEST_F(TaskExecutorTest, CallsTheCallerGaveUpOnNeverRun) {
  PushCall("c", 2);  // held: 0 and 1 have not arrived
  // The caller failed 0..2 (e.g. the actor was unreachable too long) and moved on to 3.
  PushCall("c", 3, /*first_unanswered=*/3);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c3"}));
  EXPECT_EQ(values_, (std::vector<std::string>{"ABORTED", "run1"}));
}

TEST_F(TaskExecutorTest, HeldCallRunsWhenTheCallersStartMovesUpToIt) {
  PushCall("c", 5, /*first_unanswered=*/3);  // held: 3 and 4 have not arrived
  // 3 and 4 were answered elsewhere (an older incarnation's late replies): 5 is first now, and
  // must not wait for a call that will never come.
  PushCall("c", 9, /*first_unanswered=*/5);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c5"}));
  for (int seq = 6; seq < 9; ++seq) PushCall("c", seq, /*first_unanswered=*/5);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"c5", "c6", "c7", "c8", "c9"}));
}

TEST_F(TaskExecutorTest, RestartedActorRunsResentCallsAgain) {
  // Incarnation 1 ran calls 0..2; the reply of 2 was lost when it died.
  PushCall("c", 0);
  PushCall("c", 1);
  PushCall("c", 2);
  RunAll();
  // Incarnation 2 is a new process with a new executor: at-least-once across incarnations.
  std::vector<std::string> ran;
  TaskExecutor restarted([&](const rpc::PushTaskRequest& request) {
    ran.push_back(request.task().function_name());
    return rpc::PushTaskReply();
  });
  rpc::PushTaskRequest resent;
  resent.mutable_task()->set_type(rpc::TaskSpec::ACTOR_TASK);
  resent.mutable_task()->set_function_name("c2");
  resent.mutable_task()->set_caller_worker_id("c");
  resent.mutable_task()->set_sequence_number(2);
  resent.mutable_task()->set_caller_first_unanswered(2);
  bool answered = false;
  restarted.Enqueue(&resent, [&](absl::StatusOr<rpc::PushTaskReply> reply) {
    EXPECT_TRUE(reply.ok()) << reply.status();
    answered = true;
  });
  while (restarted.RunNext()) {
  }
  EXPECT_EQ(ran, (std::vector<std::string>{"c2"}));
  EXPECT_TRUE(answered);
}

TEST_F(TaskExecutorTest, ShutdownAnswersResendsWaitingForARunningCall) {
  while_running_ = [this] {
    while_running_ = nullptr;
    PushCall("c", 0);      // a resend waits for the running first delivery...
    executor_.Shutdown();  // ...when the worker exits
  };
  PushCall("c", 0);
  RunAll();
  PushCall("c", 1);  // after shutdown: answered at once
  EXPECT_EQ(answers_, (std::vector<std::string>{"c0:the worker is exiting", "c0:ok",
                                                "c1:the worker is exiting"}));
}

TEST_F(TaskExecutorTest, ShutdownAnswersQueuedAndHeldCallsAndLaterOnes) {
  PushTask("queued");
  PushCall("c", 3);  // held
  executor_.Shutdown();
  EXPECT_FALSE(executor_.RunNext());
  PushTask("late");
  EXPECT_TRUE(ran_.empty());
  EXPECT_EQ(answers_,
            (std::vector<std::string>{"queued:the worker is exiting", "c3:the worker is exiting",
                                      "late:the worker is exiting"}));
}

TEST_F(TaskExecutorTest, ExitAfterCurrentTaskEndsTheLoopOnceAnswered) {
  PushTask("first");
  PushTask("second");
  executor_.ExitAfterCurrentTask();
  executor_.RunLoop();  // returns after one task
  EXPECT_EQ(ran_, (std::vector<std::string>{"first"}));
  EXPECT_EQ(answers_, (std::vector<std::string>{"first:ok"}));
  executor_.Shutdown();
  EXPECT_EQ(answers_.back(), "second:the worker is exiting");
}

TEST_F(TaskExecutorTest, RequestExitEndsTheLoop) {
  executor_.RequestExit();
  executor_.RunLoop();  // returns at once
  PushTask("late");
  EXPECT_EQ(answers_, (std::vector<std::string>{"late:the worker is exiting"}));
}

TEST_F(TaskExecutorTest, SuccessfulCreationTaskSetsTheActor) {
  EXPECT_TRUE(executor_.current_actor_id().IsNil());
  PushTask("bad", rpc::TaskSpec::ACTOR_CREATION_TASK);  // the constructor threw
  RunAll();
  EXPECT_TRUE(executor_.current_actor_id().IsNil());
  PushTask("make", rpc::TaskSpec::ACTOR_CREATION_TASK);
  const std::string actor_id = requests_.back().task().actor_id();
  RunAll();
  EXPECT_EQ(executor_.current_actor_id().Binary(), actor_id);
}

TEST(TaskExecutorConcurrencyTest, MaxConcurrencyRunsCallsAtOnce) {
  // Two calls that can only finish together: they wait for each other, so they finish only if
  // two executor threads run them at the same time.
  absl::Notification first_started, second_started;
  TaskExecutor executor([&](const rpc::PushTaskRequest& request) {
    rpc::PushTaskReply reply;
    reply.add_returns();
    const std::string& name = request.task().function_name();
    if (name == "first") {
      first_started.Notify();
      EXPECT_TRUE(second_started.WaitForNotificationWithTimeout(absl::Seconds(30)));
    } else if (name == "second") {
      second_started.Notify();
      EXPECT_TRUE(first_started.WaitForNotificationWithTimeout(absl::Seconds(30)));
    }
    return reply;
  });
  std::deque<rpc::PushTaskRequest> requests(3);
  requests[0].mutable_task()->set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
  requests[0].mutable_task()->set_actor_id(ActorId::FromRandom().Binary());
  requests[0].mutable_task()->set_max_concurrency(2);
  requests[1].mutable_task()->set_function_name("first");
  requests[2].mutable_task()->set_function_name("second");
  absl::Notification both_answered;
  std::atomic<int> answered{0};
  auto done = [&](absl::StatusOr<rpc::PushTaskReply> reply) {
    EXPECT_TRUE(reply.ok());
    if (++answered == 3) both_answered.Notify();
  };
  executor.Enqueue(&requests[0], done);
  ASSERT_TRUE(executor.RunNext());  // creates the actor and its second executor thread
  executor.Enqueue(&requests[1], done);
  executor.Enqueue(&requests[2], done);
  std::thread loop([&] { executor.RunLoop(); });
  EXPECT_TRUE(both_answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  executor.Shutdown();
  loop.join();
}

// ---- Cancellation (CancelTask from the owner) ----

class TaskExecutorCancelTest : public ::testing::Test {
 protected:
  TaskExecutorCancelTest()
      : executor_([this](const rpc::PushTaskRequest& request) {
          ran_.push_back(request.task().function_name());
          seen_task_id_ = TaskExecutor::CurrentTaskId();
          if (while_running_) while_running_();
          seen_cancelled_ = TaskExecutor::CurrentTaskCancelled();
          rpc::PushTaskReply reply;
          reply.add_returns()->set_inline_value("value");
          return reply;
        }) {}

  // Actor call `seq` of one caller; returns its task ID (binary).
  std::string PushCall(int64_t seq, bool cancelled_by_caller = false) {
    rpc::PushTaskRequest& request = requests_.emplace_back();
    rpc::TaskSpec* spec = request.mutable_task();
    spec->set_task_id(TaskId::FromRandom().Binary());
    spec->set_type(rpc::TaskSpec::ACTOR_TASK);
    spec->set_function_name("m" + std::to_string(seq));
    spec->set_caller_worker_id("caller");
    spec->set_sequence_number(seq);
    spec->set_cancelled(cancelled_by_caller);
    executor_.Enqueue(
        &request, [this, name = spec->function_name()](absl::StatusOr<rpc::PushTaskReply> reply) {
          answers_.push_back(name + (!reply.ok()          ? ":error"
                                     : reply->cancelled() ? ":cancelled"
                                                          : ":ok"));
        });
    return spec->task_id();
  }
  void RunAll() {
    while (executor_.RunNext()) {
    }
  }

  std::deque<rpc::PushTaskRequest> requests_;
  std::vector<std::string> ran_;
  std::vector<std::string> answers_;
  std::function<void()> while_running_;
  std::string seen_task_id_;
  bool seen_cancelled_ = false;
  TaskExecutor executor_;
};

TEST_F(TaskExecutorCancelTest, AQueuedCallIsAnsweredAsCancelledAtOnceAndLaterCallsStillRun) {
  PushCall(0);
  const std::string queued = PushCall(1);
  PushCall(2);
  EXPECT_EQ(executor_.Cancel(queued), TaskExecutor::CancelOutcome::kQueued);
  EXPECT_EQ(answers_, (std::vector<std::string>{"m1:cancelled"}));  // before anything ran
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"m0", "m2"}));
  EXPECT_EQ(answers_, (std::vector<std::string>{"m1:cancelled", "m0:ok", "m2:ok"}));
  // Answered: cancelling it again finds nothing here.
  EXPECT_EQ(executor_.Cancel(queued), TaskExecutor::CancelOutcome::kNotHere);
}

TEST_F(TaskExecutorCancelTest, ARunningCallSeesTheFlagAndItsReplyIsMarkedCancelled) {
  const std::string running = PushCall(0);
  while_running_ = [&] {
    EXPECT_FALSE(TaskExecutor::CurrentTaskCancelled());
    EXPECT_EQ(executor_.Cancel(running), TaskExecutor::CancelOutcome::kRunning);
    EXPECT_TRUE(TaskExecutor::CurrentTaskCancelled());
  };
  RunAll();
  EXPECT_EQ(seen_task_id_, running);
  EXPECT_TRUE(seen_cancelled_);
  EXPECT_EQ(answers_, (std::vector<std::string>{"m0:cancelled"}));
  // Off the executor's thread, and after the task: no task, never cancelled.
  EXPECT_EQ(TaskExecutor::CurrentTaskId(), "");
  EXPECT_FALSE(TaskExecutor::CurrentTaskCancelled());
}

TEST_F(TaskExecutorCancelTest, CallsCancelledBeforeTheyArriveOrByTheirCallerNeverRun) {
  // Cancelled by its caller before it was sent: it keeps its place, so m1 is not held forever.
  PushCall(0, /*cancelled_by_caller=*/true);
  PushCall(1);
  RunAll();
  EXPECT_EQ(ran_, (std::vector<std::string>{"m1"}));
  EXPECT_EQ(answers_, (std::vector<std::string>{"m0:cancelled", "m1:ok"}));
  // The CancelTask overtook the push: answered as cancelled when its turn comes.
  rpc::PushTaskRequest& early = requests_.emplace_back();
  early.mutable_task()->set_task_id(TaskId::FromRandom().Binary());
  early.mutable_task()->set_function_name("task");
  EXPECT_EQ(executor_.Cancel(early.task().task_id()), TaskExecutor::CancelOutcome::kNotHere);
  bool cancelled = false;
  executor_.Enqueue(&early, [&](absl::StatusOr<rpc::PushTaskReply> reply) {
    cancelled = reply.ok() && reply->cancelled();
  });
  RunAll();
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(ran_.size(), 1u);
}

// ---- Async actors: calls answered later, on the actor's event loop ----

// An async actor on an executor driven by the test thread (RunNext): each call parks itself
// (keeps its ActorCall and Finish) instead of answering, as a coroutine waiting in a co_await.
class TaskExecutorAsyncTest : public ::testing::Test {
 protected:
  struct Parked {
    std::string name;
    std::shared_ptr<TaskExecutor::ActorCall> call;
    TaskExecutor::Finish finish;
  };

  TaskExecutorAsyncTest()
      : executor_([this](const rpc::PushTaskRequest& request, TaskExecutor::Finish finish) {
          rpc::PushTaskReply reply;
          reply.add_returns()->set_inline_value(request.task().function_name());
          if (request.task().type() != rpc::TaskSpec::ACTOR_TASK) {
            finish(std::move(reply));
            return;
          }
          started_.push_back(request.task().function_name());
          ASSERT_NE(TaskExecutor::CurrentCall(), nullptr);
          parked_.push_back(
              {request.task().function_name(), TaskExecutor::CurrentCall(), std::move(finish)});
        }) {}

  void CreateActor(int max_concurrency, std::map<std::string, int> groups = {}) {
    rpc::PushTaskRequest& request = requests_.emplace_back();
    rpc::TaskSpec* spec = request.mutable_task();
    spec->set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
    spec->set_actor_id(ActorId::FromRandom().Binary());
    spec->set_max_concurrency(max_concurrency);
    spec->set_async_actor(true);
    for (const auto& [name, limit] : groups) (*spec->mutable_concurrency_groups())[name] = limit;
    executor_.Enqueue(&request, [](absl::StatusOr<rpc::PushTaskReply>) {});
    ASSERT_TRUE(executor_.RunNext());
  }
  // Actor call `seq` of one caller, in `group`; returns its task ID (binary).
  std::string PushCall(int64_t seq, const std::string& group = "") {
    rpc::PushTaskRequest& request = requests_.emplace_back();
    rpc::TaskSpec* spec = request.mutable_task();
    spec->set_task_id(TaskId::FromRandom().Binary());
    spec->set_type(rpc::TaskSpec::ACTOR_TASK);
    spec->set_function_name("m" + std::to_string(seq));
    spec->set_caller_worker_id("caller");
    spec->set_sequence_number(seq);
    spec->set_concurrency_group(group);
    executor_.Enqueue(&request, [this, name = spec->function_name()](
                                    absl::StatusOr<rpc::PushTaskReply> reply) {
      answers_.push_back(name + (!reply.ok()          ? ":" + std::string(reply.status().message())
                                 : reply->cancelled() ? ":cancelled"
                                                      : ":" + reply->returns(0).inline_value()));
    });
    return spec->task_id();
  }
  void RunAll() {
    while (executor_.RunNext()) {
    }
  }
  // Resumes parked call `i` on the loop, which answers it with `value`.
  void Resume(size_t i, const std::string& value) {
    Parked* parked = &parked_[i];
    parked->call->Post([this, parked, value] {
      seen_in_posted_.push_back(TaskExecutor::CurrentTaskSpec()->function_name());
      rpc::PushTaskReply reply;
      reply.add_returns()->set_inline_value(value);
      parked->finish(std::move(reply));
    });
  }

  std::deque<rpc::PushTaskRequest> requests_;
  std::vector<std::string> started_;
  std::deque<Parked> parked_;
  std::vector<std::string> answers_;
  std::vector<std::string> seen_in_posted_;
  TaskExecutor executor_;
};

TEST_F(TaskExecutorAsyncTest, ManyCallsAreInFlightAtOnceOnTheOneLoopThread) {
  CreateActor(/*max_concurrency=*/1000);
  constexpr int kCalls = 200;
  for (int i = 0; i < kCalls; ++i) PushCall(i);
  RunAll();  // on this thread only: every call starts while none has finished
  EXPECT_EQ(started_.size(), static_cast<size_t>(kCalls));
  EXPECT_EQ(executor_.num_in_flight(), kCalls);
  EXPECT_TRUE(answers_.empty());
  // Resumed in reverse: each finishes when what it waits for comes, not in arrival order.
  for (int i = kCalls - 1; i >= 0; --i) Resume(i, "done");
  RunAll();
  ASSERT_EQ(answers_.size(), static_cast<size_t>(kCalls));
  EXPECT_EQ(answers_.front(), "m" + std::to_string(kCalls - 1) + ":done");
  EXPECT_EQ(answers_.back(), "m0:done");
  // A posted closure runs as part of its call: the call's spec reads as the current one.
  EXPECT_EQ(seen_in_posted_.front(), "m" + std::to_string(kCalls - 1));
  EXPECT_EQ(executor_.num_in_flight(), 0);
}

TEST_F(TaskExecutorAsyncTest, NoMoreThanTheLimitAreInFlight) {
  CreateActor(/*max_concurrency=*/3);
  for (int i = 0; i < 5; ++i) PushCall(i);
  RunAll();
  EXPECT_EQ(started_, (std::vector<std::string>{"m0", "m1", "m2"}));
  Resume(1, "done");
  RunAll();  // m1's answer makes room for m3
  EXPECT_EQ(answers_, (std::vector<std::string>{"m1:done"}));
  EXPECT_EQ(started_, (std::vector<std::string>{"m0", "m1", "m2", "m3"}));
}

TEST_F(TaskExecutorAsyncTest, EachConcurrencyGroupHasItsOwnLimitOnTheLoop) {
  CreateActor(/*max_concurrency=*/10, {{"io", 1}});
  PushCall(0, "io");
  PushCall(1, "io");
  PushCall(2);
  PushCall(3);
  RunAll();
  EXPECT_EQ(started_, (std::vector<std::string>{"m0", "m2", "m3"}));  // m1 waits for io's room
  EXPECT_TRUE(executor_.HasConcurrencyGroup("io"));
  EXPECT_FALSE(executor_.HasConcurrencyGroup("compute"));
}

TEST_F(TaskExecutorAsyncTest, CancelWakesAWaitingCallThroughItsCallback) {
  CreateActor(/*max_concurrency=*/10);
  const std::string waiting = PushCall(0);
  RunAll();
  ASSERT_EQ(parked_.size(), 1u);
  bool woken = false;
  parked_[0].call->OnCancel([&] {
    woken = true;
    Resume(0, "stopped");  // the coroutine resumes and ends (TaskCancelledError in the API)
  });
  EXPECT_EQ(executor_.Cancel(waiting), TaskExecutor::CancelOutcome::kRunning);
  EXPECT_TRUE(woken);
  RunAll();
  EXPECT_EQ(answers_, (std::vector<std::string>{"m0:cancelled"}));
  // Registered after the cancel: runs at once.
  bool late = false;
  PushCall(1);
  RunAll();
  EXPECT_EQ(executor_.Cancel(requests_.back().task().task_id()),
            TaskExecutor::CancelOutcome::kRunning);
  parked_[1].call->OnCancel([&] { late = true; });
  EXPECT_TRUE(late);
}

TEST_F(TaskExecutorAsyncTest, TimersRunOnTheLoopAfterTheirDelay) {
  CreateActor(/*max_concurrency=*/10);
  PushCall(0);
  RunAll();
  bool fired = false;
  parked_[0].call->PostAfter(absl::Milliseconds(5), [&] { fired = true; });
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!fired && absl::Now() < deadline) executor_.RunNext();
  EXPECT_TRUE(fired);
}

TEST_F(TaskExecutorAsyncTest, ShutdownAnswersWaitingCallsOnceAndDropsLaterResumes) {
  CreateActor(/*max_concurrency=*/10);
  PushCall(0);
  RunAll();
  executor_.Shutdown();
  EXPECT_EQ(answers_, (std::vector<std::string>{"m0:the worker is exiting"}));
  Resume(0, "late");  // dropped: the loop is gone
  rpc::PushTaskReply reply;
  reply.add_returns();
  parked_[0].finish(reply);  // already answered: ignored
  EXPECT_EQ(answers_.size(), 1u);
}

TEST_F(TaskExecutorAsyncTest, CallsOutsideAnAsyncActorHaveNoLoop) {
  // Before the actor exists (and in tasks, and threaded actors) nothing would run what is
  // posted, so there is no call to post to.
  EXPECT_EQ(TaskExecutor::CurrentCall(), nullptr);
  std::shared_ptr<TaskExecutor::ActorCall> seen = nullptr;
  bool ran = false;
  TaskExecutor threaded([&](const rpc::PushTaskRequest&) {
    seen = TaskExecutor::CurrentCall();
    ran = true;
    rpc::PushTaskReply reply;
    reply.add_returns();
    return reply;
  });
  rpc::PushTaskRequest task;
  task.mutable_task()->set_function_name("task");
  threaded.Enqueue(&task, [](absl::StatusOr<rpc::PushTaskReply>) {});
  ASSERT_TRUE(threaded.RunNext());
  EXPECT_TRUE(ran);
  EXPECT_EQ(seen, nullptr);
}

// ---- Concurrency groups of a threaded actor ----

TEST(TaskExecutorGroupsTest, EachGroupRunsOnItsOwnThreads) {
  // The default group has one thread, busy until both "io" calls ran; the io calls wait for
  // each other: everything finishes only if io has two threads of its own.
  absl::Notification io1_started, io2_started, io_done;
  std::atomic<int> io_finished{0};
  TaskExecutor executor([&](const rpc::PushTaskRequest& request) {
    rpc::PushTaskReply reply;
    reply.add_returns();
    const std::string& name = request.task().function_name();
    if (name == "default") {
      EXPECT_TRUE(io_done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    } else if (name == "io1") {
      io1_started.Notify();
      EXPECT_TRUE(io2_started.WaitForNotificationWithTimeout(absl::Seconds(30)));
    } else if (name == "io2") {
      io2_started.Notify();
      EXPECT_TRUE(io1_started.WaitForNotificationWithTimeout(absl::Seconds(30)));
    }
    if (name.rfind("io", 0) == 0 && ++io_finished == 2) io_done.Notify();
    return reply;
  });
  std::deque<rpc::PushTaskRequest> requests(4);
  requests[0].mutable_task()->set_type(rpc::TaskSpec::ACTOR_CREATION_TASK);
  requests[0].mutable_task()->set_actor_id(ActorId::FromRandom().Binary());
  requests[0].mutable_task()->set_max_concurrency(1);
  (*requests[0].mutable_task()->mutable_concurrency_groups())["io"] = 2;
  const char* names[] = {"", "default", "io1", "io2"};
  for (int i = 1; i < 4; ++i) {
    rpc::TaskSpec* spec = requests[i].mutable_task();
    spec->set_type(rpc::TaskSpec::ACTOR_TASK);
    spec->set_function_name(names[i]);
    spec->set_caller_worker_id("caller");
    spec->set_sequence_number(i - 1);
    spec->set_concurrency_group(i == 1 ? "" : "io");
  }
  absl::Notification all_answered;
  std::atomic<int> answered{0};
  auto done = [&](absl::StatusOr<rpc::PushTaskReply> reply) {
    EXPECT_TRUE(reply.ok());
    if (++answered == 4) all_answered.Notify();
  };
  executor.Enqueue(&requests[0], done);
  ASSERT_TRUE(executor.RunNext());  // creates the actor and the io group's two threads
  EXPECT_TRUE(executor.HasConcurrencyGroup("io"));
  EXPECT_FALSE(executor.HasConcurrencyGroup("compute"));
  for (int i = 1; i < 4; ++i) executor.Enqueue(&requests[i], done);
  std::thread loop([&] { executor.RunLoop(); });
  EXPECT_TRUE(all_answered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  executor.Shutdown();
  loop.join();
}

}  // namespace
}  // namespace troupe
