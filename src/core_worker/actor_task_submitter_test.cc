#include "src/core_worker/actor_task_submitter.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/clock.h"
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
                    }}) {}

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

TEST_F(ActorTaskSubmitterTest, UnreachableWhileAliveFailsCallsAfterTheLimit) {
  directory_.Set(actor_, Alive("a:1", /*max_task_retries=*/-1));
  submitter_.Submit(actor_, Call("m0"));
  submitter_.Tick();
  pushes_.Reply(0, absl::UnavailableError("deadline exceeded"));
  // The directory still says ALIVE at the same address: look again every 50 ms...
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 2);
  clock_.Advance(absl::Milliseconds(49));
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 2);
  clock_.Advance(absl::Milliseconds(1));
  submitter_.Tick();
  EXPECT_EQ(directory_.lookups(), 3);
  // ...and give up once it has been unreachable for the limit.
  clock_.Advance(ActorTaskSubmitter::kUnreachableLimit - absl::Milliseconds(51));
  submitter_.Tick();
  EXPECT_TRUE(failures_.empty());
  EXPECT_EQ(directory_.lookups(), 4);
  clock_.Advance(absl::Milliseconds(50));  // the next lookup, past the limit
  submitter_.Tick();
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kActorDied);
  EXPECT_NE(failures_[0].message.find("unreachable for 30s"), std::string::npos);
  EXPECT_EQ(pushes_.num_pushes(), 1u);  // never resent to the unreachable worker
  // The actor stays usable: later calls go to the address the directory reports.
  submitter_.Submit(actor_, Call("m1"));
  EXPECT_EQ(Pushed(1), (std::vector<std::string>{"a:1 m1#1"}));
}

}  // namespace
}  // namespace troupe
