#include "src/core_worker/actor_task_submitter.h"

#include <algorithm>
#include <deque>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/common/test_seed.h"
#include "src/core_worker/task_executor.h"
#include "src/rpc/fake_peer_clients.h"

namespace troupe {
namespace {

rpc::TaskSpec Call(const std::string& method) {
  rpc::TaskSpec spec;
  spec.set_task_id(TaskId::FromRandom().Binary());
  spec.set_type(rpc::TaskSpec::ACTOR_TASK);
  spec.set_function_name(method);
  return spec;
}

rpc::ActorInfo Alive(const std::string& address, int64_t max_task_retries = 0) {
  rpc::ActorInfo info;
  info.set_state(rpc::ActorInfo::ALIVE);
  info.set_worker_address(address);
  info.set_max_task_retries(max_task_retries);
  return info;
}

class ActorTaskSubmitterTest : public ::testing::Test {
 protected:
  ActorTaskSubmitterTest()
      : submitter_(&directory_, &pushes_, &clock_, "caller-1",
                   {[this](const rpc::TaskSpec& spec, rpc::PushTaskReply) {
                      replies_.push_back(spec.function_name());
                    },
                    [this](const rpc::TaskSpec& spec, StoredObject::Error error,
                           const std::string& message) {
                      failures_.push_back({spec.function_name(), error, message});
                    },
                    [this] { ++timer_wakes_; }}) {}

  // Pushes made so far: (address, method, sequence number).
  std::vector<std::string> Pushed(size_t from = 0) const {
    std::vector<std::string> out;
    for (size_t i = from; i < pushes_.num_pushes(); ++i) {
      const auto push = pushes_.push(i);
      out.push_back(push.worker_address + " " + push.request.task().function_name() + "#" +
                    std::to_string(push.request.task().sequence_number()));
    }
    return out;
  }

  struct Failure {
    std::string method;
    StoredObject::Error error;
    std::string message;
  };
  const ActorId actor_ = ActorId::FromRandom();
  FakeClock clock_;
  FakeActorDirectory directory_;
  FakeTaskPushClient pushes_;
  std::vector<std::string> replies_;
  std::vector<Failure> failures_;
  int timer_wakes_ = 0;
  ActorTaskSubmitter submitter_;
};

TEST_F(ActorTaskSubmitterTest, CallsGetConsecutiveNumbersAndArePushedInOrder) {
  directory_.Set(actor_, Alive("a:1"));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Submit(actor_, Call("m1"));
  EXPECT_EQ(pushes_.num_pushes(), 0u);  // the address is not known yet
  submitter_.Tick();
  EXPECT_EQ(Pushed(), (std::vector<std::string>{"a:1 m0#0", "a:1 m1#1"}));
  submitter_.Submit(actor_, Call("m2"));  // known now: pushed at once
  EXPECT_EQ(Pushed(2), (std::vector<std::string>{"a:1 m2#2"}));
  const auto push = pushes_.push(2);
  EXPECT_EQ(push.request.task().caller_worker_id(), "caller-1");
  EXPECT_EQ(push.request.task().caller_first_unanswered(), 0);

  pushes_.Reply(1, rpc::PushTaskReply());
  pushes_.Reply(0, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m1", "m0"}));
  submitter_.Submit(actor_, Call("m3"));
  EXPECT_EQ(pushes_.push(3).request.task().caller_first_unanswered(), 2);  // m2 is unanswered
  EXPECT_EQ(submitter_.counters().submitted, 4);
  EXPECT_EQ(submitter_.counters().finished, 2);
}

TEST_F(ActorTaskSubmitterTest, TickIsNeededOnlyWhileAnActorIsLookedUp) {
  EXPECT_FALSE(submitter_.NeedsTick());
  submitter_.Submit(actor_, Call("m0"));  // a new actor: where it lives is not known yet
  EXPECT_TRUE(submitter_.NeedsTick());
  EXPECT_EQ(timer_wakes_, 1);
  directory_.Set(actor_, Alive("a:1"));
  submitter_.Tick();
  EXPECT_FALSE(submitter_.NeedsTick());  // resolved: the timer may sleep
  submitter_.Submit(actor_, Call("m1"));  // known: pushed at once, no wake-up needed
  EXPECT_EQ(timer_wakes_, 1);
  EXPECT_FALSE(submitter_.NeedsTick());
  pushes_.Reply(1, absl::UnavailableError("connection reset"));  // a transport error: ask again
  EXPECT_TRUE(submitter_.NeedsTick());
  EXPECT_EQ(timer_wakes_, 2);
  submitter_.Tick();  // still ALIVE at a:1: resent there
  EXPECT_FALSE(submitter_.NeedsTick());
  submitter_.OnNodeDead(NodeId::FromRandom());  // not the actor's node: nothing to look up
  EXPECT_FALSE(submitter_.NeedsTick());
}

TEST_F(ActorTaskSubmitterTest, ManyPendingActorsAreLookedUpInOneCallLessOftenAsTheyWait) {
  const std::vector<ActorId> actors = {ActorId::FromRandom(), ActorId::FromRandom(),
                                       ActorId::FromRandom()};
  rpc::ActorInfo pending;
  pending.set_state(rpc::ActorInfo::PENDING_CREATION);
  for (const auto& id : actors) {
    directory_.Set(id, pending);
    submitter_.Submit(id, Call("m"));
  }
  submitter_.Tick();
  EXPECT_EQ(directory_.calls(), 1);  // three actors, one call
  EXPECT_EQ(directory_.lookups(), 3);
  clock_.Advance(absl::Seconds(10));  // still pending after 10 s: asked every 500 ms
  submitter_.Tick();
  EXPECT_EQ(directory_.calls(), 2);
  clock_.Advance(absl::Milliseconds(499));
  submitter_.Tick();
  EXPECT_EQ(directory_.calls(), 2);
  clock_.Advance(absl::Milliseconds(1));
  submitter_.Tick();
  EXPECT_EQ(directory_.calls(), 3);
  EXPECT_EQ(pushes_.num_pushes(), 0u);
  for (size_t i = 0; i < actors.size(); ++i) {
    directory_.Set(actors[i], Alive("a:" + std::to_string(i)));
  }
  clock_.Advance(absl::Milliseconds(500));
  submitter_.Tick();
  EXPECT_EQ(directory_.calls(), 4);
  ASSERT_EQ(pushes_.num_pushes(), 3u);  // each call went to its own actor
  std::vector<std::string> addresses;
  for (size_t i = 0; i < 3; ++i) addresses.push_back(pushes_.push(i).worker_address);
  std::sort(addresses.begin(), addresses.end());
  EXPECT_EQ(addresses, (std::vector<std::string>{"a:0", "a:1", "a:2"}));
  EXPECT_FALSE(submitter_.NeedsTick());
}

TEST_F(ActorTaskSubmitterTest, LookupsWhileTheAddressIsUnknownAreThrottled) {
  submitter_.Submit(actor_, Call("m0"));  // the directory does not know the actor yet
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 1);
  submitter_.Tick();
  clock_.Advance(absl::Milliseconds(19));
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 1);
  clock_.Advance(absl::Milliseconds(1));
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 2);
  rpc::ActorInfo pending;
  pending.set_state(rpc::ActorInfo::PENDING_CREATION);
  directory_.Set(actor_, pending);
  clock_.Advance(absl::Milliseconds(20));
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 3);
  EXPECT_EQ(pushes_.num_pushes(), 0u);
  directory_.Set(actor_, Alive("a:1"));
  clock_.Advance(absl::Milliseconds(20));
  submitter_.Tick();
  EXPECT_EQ(Pushed(), (std::vector<std::string>{"a:1 m0#0"}));
  submitter_.Tick();  // resolved: no more lookups
  clock_.Advance(absl::Seconds(1));
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 4);
}

TEST_F(ActorTaskSubmitterTest, CallsInFlightAreResentInOrderToTheRestartedActor) {
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/1));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Submit(actor_, Call("m1"));
  submitter_.Tick();
  ASSERT_EQ(pushes_.num_pushes(), 2u);
  pushes_.Reply(0, absl::UnavailableError("connection reset"));  // the worker died
  submitter_.Submit(actor_, Call("m2"));  // held while the actor is looked up
  EXPECT_EQ(pushes_.num_pushes(), 2u);
  directory_.Set(actor_, Alive("b:2", /*max_task_retries=*/1));
  submitter_.Tick();
  EXPECT_EQ(Pushed(2), (std::vector<std::string>{"b:2 m0#0", "b:2 m1#1", "b:2 m2#2"}));
  EXPECT_EQ(pushes_.push(2).request.task().caller_first_unanswered(), 0);
  pushes_.Reply(1, absl::UnavailableError("connection reset"));  // the old m1: ignored
  for (size_t i = 2; i < 5; ++i) pushes_.Reply(i, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m0", "m1", "m2"}));
  EXPECT_TRUE(failures_.empty());
}

TEST_F(ActorTaskSubmitterTest, AtMostOnceCallsInFlightFailWhenTheActorRestarts) {
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/0));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Submit(actor_, Call("m1"));
  submitter_.Tick();
  pushes_.Reply(0, absl::UnavailableError("connection reset"));
  submitter_.Submit(actor_, Call("m2"));  // not sent yet: goes to the new instance
  rpc::ActorInfo restarted = Alive("b:2", 0);
  restarted.set_death_cause("the worker process crashed");
  directory_.Set(actor_, restarted);
  submitter_.Tick();
  ASSERT_EQ(failures_.size(), 2u);
  EXPECT_EQ(failures_[0].method, "m0");
  EXPECT_EQ(failures_[1].method, "m1");
  for (const auto& failure : failures_) {
    EXPECT_EQ(failure.error, StoredObject::Error::kActorDied);
    EXPECT_NE(failure.message.find("the worker process crashed"), std::string::npos);
  }
  EXPECT_EQ(Pushed(2), (std::vector<std::string>{"b:2 m2#2"}));
  EXPECT_EQ(pushes_.push(2).request.task().caller_first_unanswered(), 2);
  EXPECT_EQ(submitter_.counters().failed, 2);
}

TEST_F(ActorTaskSubmitterTest, DeadActorFailsEveryWaitingCallWithTheCause) {
  directory_.Set(actor_, Alive("a:1"));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  pushes_.Reply(0, absl::UnavailableError("connection reset"));
  submitter_.Submit(actor_, Call("m1"));
  rpc::ActorInfo dead;
  dead.set_state(rpc::ActorInfo::DEAD);
  dead.set_death_cause("killed by KillActor");
  directory_.Set(actor_, dead);
  submitter_.Tick();
  ASSERT_EQ(failures_.size(), 2u);
  for (const auto& failure : failures_) {
    EXPECT_EQ(failure.error, StoredObject::Error::kActorDied);
    EXPECT_NE(failure.message.find("killed by KillActor"), std::string::npos);
  }
  submitter_.Submit(actor_, Call("m2"));  // fails at once
  ASSERT_EQ(failures_.size(), 3u);
  EXPECT_EQ(failures_[2].method, "m2");
  EXPECT_EQ(pushes_.num_pushes(), 1u);
}

// ---- The actor's node declared dead (a partition: its worker answers nothing) ----

rpc::ActorInfo AliveOn(const NodeId& node, const std::string& address, int64_t max_task_retries) {
  rpc::ActorInfo info = Alive(address, max_task_retries);
  info.set_node_id(node.Binary());
  info.set_worker_id(address + "-worker");
  return info;
}

TEST_F(ActorTaskSubmitterTest, NodeDeathCancelsCallsAndResendsThemToTheRestartedActor) {
  const NodeId dead = NodeId::FromRandom();
  directory_.Set(actor_, AliveOn(dead, "a:1", /*max_task_retries=*/1));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  submitter_.OnNodeDead(dead);
  EXPECT_TRUE(pushes_.push(0).cancelled);
  pushes_.Reply(0, absl::CancelledError("cancelled"));
  // The GCS has not reacted yet: ALIVE on the dead node is stale, nothing is resent there.
  clock_.Advance(absl::Milliseconds(30));
  submitter_.Tick();
  EXPECT_EQ(pushes_.num_pushes(), 1u);
  directory_.Set(actor_, AliveOn(NodeId::FromRandom(), "b:2", 1));
  clock_.Advance(absl::Milliseconds(30));
  submitter_.Tick();
  EXPECT_EQ(Pushed(1), (std::vector<std::string>{"b:2 m0#0"}));
  pushes_.Reply(1, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m0"}));
  EXPECT_TRUE(failures_.empty());
}

TEST_F(ActorTaskSubmitterTest, LateReplyFromADeadNodeIsRefusedAndTheCallFailsAsActorDied) {
  const NodeId dead = NodeId::FromRandom();
  directory_.Set(actor_, AliveOn(dead, "a:1", /*max_task_retries=*/0));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  submitter_.OnNodeDead(dead);
  pushes_.Reply(0, rpc::PushTaskReply());  // the node came back; its answer raced the cancel
  EXPECT_TRUE(replies_.empty());
  rpc::ActorInfo restarted = AliveOn(NodeId::FromRandom(), "b:2", 0);
  restarted.set_death_cause("its node died");
  directory_.Set(actor_, restarted);
  submitter_.Tick();
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kActorDied);
  EXPECT_NE(failures_[0].message.find("its node died"), std::string::npos);
  EXPECT_TRUE(replies_.empty());
  EXPECT_EQ(pushes_.num_pushes(), 1u);  // at most once: not resent
}

TEST_F(ActorTaskSubmitterTest, NodeDeathOfADeadActorFailsItsCallsWithTheCause) {
  const NodeId dead = NodeId::FromRandom();
  directory_.Set(actor_, AliveOn(dead, "a:1", /*max_task_retries=*/-1));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  submitter_.OnNodeDead(dead);
  rpc::ActorInfo buried;
  buried.set_state(rpc::ActorInfo::DEAD);
  buried.set_death_cause("its node died (health check failed)");
  directory_.Set(actor_, buried);
  submitter_.Tick();
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kActorDied);
  EXPECT_NE(failures_[0].message.find("health check failed"), std::string::npos);
}

TEST_F(ActorTaskSubmitterTest, UnreachableWhileAliveFailsCallsAfterTheLimit) {
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/-1));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  pushes_.Reply(0, absl::UnavailableError("connection refused"));
  // The directory still says ALIVE at the same worker: resend there at once...
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 2);
  EXPECT_EQ(Pushed(1), (std::vector<std::string>{"a:1 m0#0"}));
  pushes_.Reply(1, absl::UnavailableError("connection refused"));
  // ...and, while it keeps failing, every kResendDelay (not in a tight loop)...
  submitter_.Tick();
  clock_.Advance(ActorTaskSubmitter::kResendDelay - absl::Milliseconds(1));
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 2);
  clock_.Advance(absl::Milliseconds(1));
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 3);
  ASSERT_EQ(pushes_.num_pushes(), 3u);
  // ...until no push has got through for the limit.
  size_t answered = 2;
  for (int round = 0; round < 10000 && failures_.empty(); ++round) {
    for (; answered < pushes_.num_pushes(); ++answered) {
      pushes_.Reply(answered, absl::UnavailableError("connection refused"));
    }
    clock_.Advance(ActorTaskSubmitter::kResendDelay);
    submitter_.Tick();
  }
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kActorDied);
  EXPECT_NE(failures_[0].message.find("has failed every call for 30s"), std::string::npos)
      << failures_[0].message;
  // The actor stays usable: later calls go to the address the directory reports.
  const size_t before = pushes_.num_pushes();
  submitter_.Submit(actor_, Call("m1"));
  EXPECT_EQ(Pushed(before), (std::vector<std::string>{"a:1 m1#1"}));
}

TEST_F(ActorTaskSubmitterTest, TransportErrorOnALiveActorResendsOnlyTheFailedCall) {
  // At-most-once across restarts, yet resent within one incarnation: the actor deduplicates.
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/0));
  for (const char* method : {"m0", "m1", "m2"}) submitter_.Submit(actor_, Call(method));
  submitter_.Tick();
  ASSERT_EQ(pushes_.num_pushes(), 3u);
  pushes_.Reply(1, absl::DeadlineExceededError("deadline exceeded"));
  submitter_.Submit(actor_, Call("m3"));  // held while the actor is looked up
  EXPECT_EQ(pushes_.num_pushes(), 3u);
  submitter_.Tick();
  // m0 and m2 are still in flight: only m1 is resent, then m3 follows.
  EXPECT_EQ(Pushed(3), (std::vector<std::string>{"a:1 m1#1", "a:1 m3#3"}));
  EXPECT_EQ(pushes_.push(3).request.task().caller_first_unanswered(), 0);
  for (size_t i : {0, 2, 3, 4}) pushes_.Reply(i, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m0", "m2", "m1", "m3"}));
  EXPECT_TRUE(failures_.empty());
  // A later failure is a fresh start: the limit counts from it, not from the first one.
  clock_.Advance(ActorTaskSubmitter::kUnreachableLimit * 2);
  submitter_.Submit(actor_, Call("m4"));
  pushes_.Reply(5, absl::UnavailableError("socket closed"));
  submitter_.Tick();
  EXPECT_EQ(Pushed(6), (std::vector<std::string>{"a:1 m4#4"}));
  pushes_.Reply(6, rpc::PushTaskReply());
  EXPECT_EQ(replies_.back(), "m4");
  EXPECT_TRUE(failures_.empty());
}

TEST_F(ActorTaskSubmitterTest, FailureOfAnOlderPushIsIgnored) {
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/-1));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Submit(actor_, Call("m1"));
  submitter_.Tick();
  pushes_.Reply(1, absl::UnavailableError("connection reset"));
  directory_.Set(actor_, Alive("b:2", /*max_task_retries=*/-1));  // restarted
  submitter_.Tick();
  EXPECT_EQ(Pushed(2), (std::vector<std::string>{"b:2 m0#0", "b:2 m1#1"}));
  const int lookups = directory_.lookups();
  pushes_.Reply(0, absl::UnavailableError("connection reset"));  // m0's push to the old worker
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), lookups);  // not a reason to look again
  submitter_.Submit(actor_, Call("m2"));     // and calls are not held
  EXPECT_EQ(Pushed(4), (std::vector<std::string>{"b:2 m2#2"}));
  for (size_t i = 2; i < 5; ++i) pushes_.Reply(i, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m0", "m1", "m2"}));
}

TEST_F(ActorTaskSubmitterTest, RefusedCallFailsAtOnceWithTheActorsMessage) {
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/-1));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Submit(actor_, Call("m1"));
  submitter_.Tick();
  pushes_.Reply(0, absl::InvalidArgumentError("task.args[0].object_id: not an object ID"));
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].method, "m0");
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kTaskFailed);
  EXPECT_NE(failures_[0].message.find("refused the call"), std::string::npos);
  EXPECT_NE(failures_[0].message.find("not an object ID"), std::string::npos);
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 1);  // not a reason to look the actor up
  pushes_.Reply(1, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m1"}));
}

TEST_F(ActorTaskSubmitterTest, NewWorkerAtTheSameAddressIsANewIncarnation) {
  rpc::ActorInfo first = Alive("a:1", /*max_task_retries=*/0);
  first.set_worker_id("worker-1");
  directory_.Set(actor_, first);
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  pushes_.Reply(0, absl::UnavailableError("connection reset"));
  rpc::ActorInfo second = Alive("a:1", /*max_task_retries=*/0);  // the port was reused
  second.set_worker_id("worker-2");
  second.set_death_cause("the worker process crashed");
  directory_.Set(actor_, second);
  submitter_.Tick();
  ASSERT_EQ(failures_.size(), 1u);  // at-most-once: not resent to the new incarnation
  EXPECT_NE(failures_[0].message.find("the worker process crashed"), std::string::npos);
  EXPECT_EQ(pushes_.num_pushes(), 1u);
}

// ---- Batching: an actor running one call at a time ----

TEST_F(ActorTaskSubmitterTest, CallsMadeWhileTheWindowIsFullLeaveTogetherInOrder) {
  directory_.Set(actor_, Alive("a:1"));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  submitter_.Submit(actor_, Call("m1"));  // the second push of the window
  ASSERT_EQ(Pushed(), (std::vector<std::string>{"a:1 m0#0", "a:1 m1#1"}));
  EXPECT_EQ(pushes_.num_batches(), 0);  // each alone: unary pushes
  for (const char* method : {"m2", "m3", "m4"}) submitter_.Submit(actor_, Call(method));
  EXPECT_EQ(pushes_.num_pushes(), 2u);  // held: two pushes are in flight
  pushes_.Reply(0, rpc::PushTaskReply());
  // m0's push ended: the held calls leave in one batch, in order.
  EXPECT_EQ(Pushed(2), (std::vector<std::string>{"a:1 m2#2", "a:1 m3#3", "a:1 m4#4"}));
  EXPECT_EQ(pushes_.num_batches(), 1);
  for (size_t i = 2; i < 5; ++i) {
    EXPECT_EQ(pushes_.push(i).batch, 0);
    EXPECT_EQ(pushes_.push(i).request.task().caller_first_unanswered(), 1);  // m1 unanswered
  }
  submitter_.Submit(actor_, Call("m5"));  // two pushes in flight again (m1, the batch)
  EXPECT_EQ(pushes_.num_pushes(), 5u);
  pushes_.Reply(2, rpc::PushTaskReply());  // part of the batch: it is still in flight
  EXPECT_EQ(pushes_.num_pushes(), 5u);
  pushes_.Reply(1, rpc::PushTaskReply());
  EXPECT_EQ(Pushed(5), (std::vector<std::string>{"a:1 m5#5"}));
  pushes_.ReplyTogether({{3, rpc::PushTaskReply()}, {4, rpc::PushTaskReply()}});
  pushes_.Reply(5, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m0", "m2", "m1", "m3", "m4", "m5"}));
  EXPECT_TRUE(failures_.empty());
  EXPECT_EQ(submitter_.counters().finished, 6);
}

TEST_F(ActorTaskSubmitterTest, CallsToAnActorRunningSeveralAtOnceArePushedAtOnceAlone) {
  // One of its calls may wait for a later one: none is held back.
  rpc::ActorInfo info = Alive("a:1");
  info.set_max_concurrency(4);
  directory_.Set(actor_, info);
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  for (const char* method : {"m1", "m2", "m3"}) submitter_.Submit(actor_, Call(method));
  EXPECT_EQ(Pushed(), (std::vector<std::string>{"a:1 m0#0", "a:1 m1#1", "a:1 m2#2", "a:1 m3#3"}));
  EXPECT_EQ(pushes_.num_batches(), 0);
}

TEST_F(ActorTaskSubmitterTest, ACallResentAfterALookupDoesNotWaitForTheWindow) {
  // The pushes in flight hold calls the actor keeps waiting for the lost one: holding it back
  // until one of them ends would never end.
  directory_.Set(actor_, Alive("a:1"));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Submit(actor_, Call("m1"));
  submitter_.Tick();  // one batch: m0, m1
  submitter_.Submit(actor_, Call("m2"));  // the window's second push
  ASSERT_EQ(pushes_.num_pushes(), 3u);
  pushes_.Reply(0, absl::UnavailableError("connection reset"));  // m0 lost; m1 waits for it
  submitter_.Tick();  // the GCS: still alive there
  EXPECT_EQ(Pushed(3), (std::vector<std::string>{"a:1 m0#0"}));
  for (size_t i : {3, 1, 2}) pushes_.Reply(i, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m0", "m1", "m2"}));
  EXPECT_TRUE(failures_.empty());
}

TEST_F(ActorTaskSubmitterTest, HeldCallsNeverSentGoToTheRestartedActorEvenAtMostOnce) {
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/0));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  for (const char* method : {"m1", "m2"}) submitter_.Submit(actor_, Call(method));
  ASSERT_EQ(pushes_.num_pushes(), 2u);  // m2 held
  pushes_.Reply(1, absl::UnavailableError("connection reset"));  // the worker died
  rpc::ActorInfo restarted = Alive("b:2", 0);
  restarted.set_death_cause("the worker process crashed");
  directory_.Set(actor_, restarted);
  submitter_.Tick();
  // m0 and m1 were sent to the dead incarnation: at-most-once fails them; m2 never reached it.
  ASSERT_EQ(failures_.size(), 2u);
  EXPECT_EQ(Pushed(2), (std::vector<std::string>{"b:2 m2#2"}));
}

// ---- Cancel ----

TEST_F(ActorTaskSubmitterTest, CancelOfAHeldCallFailsItAtOnceAndTheActorSkipsItInOrder) {
  directory_.Set(actor_, Alive("a:1"));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  submitter_.Submit(actor_, Call("m1"));  // the window's second push
  const rpc::TaskSpec held = Call("m2");
  submitter_.Submit(actor_, held);  // held: two pushes in flight
  ASSERT_EQ(pushes_.num_pushes(), 2u);
  ActorId found;
  EXPECT_EQ(submitter_.Cancel(*TaskId::FromBinary(held.task_id()), /*force=*/false,
                              /*recursive=*/true, &found),
            ActorTaskSubmitter::CancelOutcome::kDropped);
  EXPECT_EQ(found, actor_);
  ASSERT_EQ(failures_.size(), 1u);  // at once, before the actor hears of it
  EXPECT_EQ(failures_[0].method, "m2");
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kCancelled);
  submitter_.Submit(actor_, Call("m3"));
  pushes_.Reply(0, rpc::PushTaskReply());
  // m2 still goes, in its place, marked: the actor skips it and runs m3 after it.
  EXPECT_EQ(Pushed(2), (std::vector<std::string>{"a:1 m2#2", "a:1 m3#3"}));
  EXPECT_TRUE(pushes_.push(2).request.task().cancelled());
  EXPECT_FALSE(pushes_.push(3).request.task().cancelled());
  rpc::PushTaskReply skipped;
  skipped.set_cancelled(true);
  pushes_.Reply(2, skipped);
  pushes_.Reply(1, rpc::PushTaskReply());
  pushes_.Reply(3, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m0", "m1", "m3"}));
  EXPECT_EQ(failures_.size(), 1u);  // m2 is not reported twice
  EXPECT_EQ(submitter_.Cancel(*TaskId::FromBinary(held.task_id()), false, true, &found),
            ActorTaskSubmitter::CancelOutcome::kNotFound);
  EXPECT_EQ(submitter_.Cancel(TaskId::FromRandom(), true, true, &found),
            ActorTaskSubmitter::CancelOutcome::kNotFound);
}

TEST_F(ActorTaskSubmitterTest, CancelOfASentCallTellsTheActorAndItsAnswerFailsTheCall) {
  directory_.Set(actor_, Alive("a:1"));
  const rpc::TaskSpec sent = Call("m0");
  submitter_.Submit(actor_, sent);
  submitter_.Tick();
  ActorId found;
  EXPECT_EQ(submitter_.Cancel(*TaskId::FromBinary(sent.task_id()), /*force=*/false,
                              /*recursive=*/false, &found),
            ActorTaskSubmitter::CancelOutcome::kSignalled);
  ASSERT_EQ(pushes_.cancels().size(), 1u);
  EXPECT_EQ(pushes_.cancels()[0].worker_address, "a:1");
  EXPECT_EQ(pushes_.cancels()[0].task_id, sent.task_id());
  EXPECT_FALSE(pushes_.cancels()[0].recursive);
  EXPECT_TRUE(failures_.empty());  // the actor's answer decides
  rpc::PushTaskReply cancelled;
  cancelled.set_cancelled(true);
  cancelled.add_returns()->set_inline_value("returned after seeing IsCancelled");
  pushes_.Reply(0, cancelled);
  EXPECT_TRUE(replies_.empty());
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kCancelled);
}

TEST_F(ActorTaskSubmitterTest, ForceCancelAsksForTheKillAndTheCallIsNeverResent) {
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/-1));  // resend others forever
  const rpc::TaskSpec doomed = Call("m0");
  submitter_.Submit(actor_, doomed);
  submitter_.Submit(actor_, Call("m1"));
  submitter_.Tick();
  ActorId found;
  EXPECT_EQ(submitter_.Cancel(*TaskId::FromBinary(doomed.task_id()), /*force=*/true,
                              /*recursive=*/true, &found),
            ActorTaskSubmitter::CancelOutcome::kKillActor);
  EXPECT_EQ(found, actor_);
  pushes_.Reply(0, absl::UnavailableError("connection reset"));  // killed
  rpc::ActorInfo restarted = Alive("b:2", -1);
  restarted.set_death_cause("killed");
  directory_.Set(actor_, restarted);
  submitter_.Tick();
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].method, "m0");
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kCancelled);
  EXPECT_EQ(Pushed(2), (std::vector<std::string>{"b:2 m1#1"}));  // only m1 goes to the new one
  pushes_.Reply(2, rpc::PushTaskReply());
  EXPECT_EQ(replies_, (std::vector<std::string>{"m1"}));
}

// The submitter and a real TaskExecutor (the actor's side) joined by the fake push client, with
// replies lost after delivery: every call runs exactly once, in order, and every caller sees
// the reply of its call's only run.
TEST_F(ActorTaskSubmitterTest, LostRepliesAreResentAndEachCallRunsOnce) {
  std::vector<int64_t> ran;
  TaskExecutor actor([&](const rpc::PushTaskRequest& request) {
    ran.push_back(request.task().sequence_number());
    rpc::PushTaskReply reply;
    reply.add_returns()->set_inline_value("ran " + std::to_string(ran.size()));
    return reply;
  });
  std::map<std::string, std::string> results;  // method -> reply value
  ActorTaskSubmitter submitter(
      &directory_, &pushes_, &clock_, "caller-2",
      {[&](const rpc::TaskSpec& spec, rpc::PushTaskReply reply) {
         results[spec.function_name()] = reply.returns(0).inline_value();
       },
       [&](const rpc::TaskSpec& spec, StoredObject::Error, const std::string& message) {
         ADD_FAILURE() << spec.function_name() << ": " << message;
       }});
  directory_.Set(actor_, Alive("a:1"));
  std::mt19937 random(troupe::testing::TestSeed());
  std::deque<rpc::PushTaskRequest> delivered;  // alive until answered
  size_t next_push = 0;
  auto deliver_all = [&] {
    for (; next_push < pushes_.num_pushes(); ++next_push) {
      const size_t index = next_push;
      if (random() % 4 == 0) {  // lost on the way: never reaches the actor
        pushes_.Reply(index, absl::UnavailableError("connection reset"));
        continue;
      }
      const bool lose_reply = random() % 3 == 0;  // runs, but the reply is lost
      actor.Enqueue(&delivered.emplace_back(pushes_.push(index).request),
                    [&, index, lose_reply](absl::StatusOr<rpc::PushTaskReply> reply) {
                      if (lose_reply) reply = absl::UnavailableError("reply lost");
                      pushes_.Reply(index, std::move(reply));
                    });
      while (actor.RunNext()) {
      }
    }
  };
  constexpr int kCalls = 200;
  for (int i = 0; i < kCalls; ++i) {
    submitter.Submit(actor_, Call("m" + std::to_string(i)));
    if (random() % 5 == 0) deliver_all();
    if (random() % 7 == 0) submitter.Tick();
  }
  for (int round = 0; round < 10000 && results.size() < kCalls; ++round) {
    deliver_all();
    clock_.Advance(ActorTaskSubmitter::kResendDelay);
    submitter.Tick();
  }
  // One more call acknowledges every earlier reply: the actor keeps only its own.
  submitter.Submit(actor_, Call("m" + std::to_string(kCalls)));
  for (int round = 0; round < 10000 && results.size() <= kCalls; ++round) {
    deliver_all();
    clock_.Advance(ActorTaskSubmitter::kResendDelay);
    submitter.Tick();
  }
  deliver_all();
  ASSERT_EQ(results.size(), static_cast<size_t>(kCalls + 1));
  ASSERT_EQ(ran.size(), static_cast<size_t>(kCalls + 1)) << "a call ran twice";
  for (int i = 0; i <= kCalls; ++i) {
    EXPECT_EQ(ran[i], i) << "out of order";
    EXPECT_EQ(results["m" + std::to_string(i)], "ran " + std::to_string(i + 1));
  }
  EXPECT_EQ(actor.num_cached_replies(), 1u) << "acknowledged replies must be dropped";
  submitter.Shutdown();
}

}  // namespace
}  // namespace troupe
