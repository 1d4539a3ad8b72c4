// Rebuilding lost objects from lineage, on fakes: SubmissionFacade over a real ObjectService
// (no raylet is ever called: every value here is inline) and a TaskSubmitter whose leases and
// pushes are fakes answered by the test.
#include "src/core_worker/submission_facade.h"

#include <deque>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/rpc/fake_peer_clients.h"

namespace troupe {
namespace {

constexpr char kSelf[] = "127.0.0.1:7";

rpc::PushTaskReply Ran(const rpc::PushTaskRequest& request, const std::string& value) {
  rpc::PushTaskReply reply;
  rpc::ReturnObject* ret = reply.add_returns();
  ret->set_object_id(
      ObjectId::FromIndex(*TaskId::FromBinary(request.task().task_id()), 1).Binary());
  ret->set_inline_value(value);
  return reply;
}

// Keeps every task event recorded, in order.
class RecordingSink : public TaskEventSink {
 public:
  void Record(TaskStateEvent event) override {
    absl::MutexLock lock(&mu_);
    // The name only lives through the call: keep a copy it can point at.
    event.name = names_.emplace_back(event.name);
    events_.push_back(std::move(event));
  }
  std::vector<TaskStateEvent> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<TaskStateEvent> events_;
  std::deque<std::string> names_;  // stable addresses
};

class SubmissionFacadeTest : public ::testing::Test {
 protected:
  SubmissionFacadeTest()
      : raylets_("token"),
        workers_("token"),
        objects_(ObjectService::Options{"127.0.0.1:1"}, &raylets_, &workers_, &clock_),
        submitter_(
            TaskSubmitterOptions{"127.0.0.1:1"}, &leases_, &pushes_, &clock_,
            TaskSubmitter::Callbacks{[this](const rpc::TaskSpec& spec, rpc::PushTaskReply reply) {
                                       facade_->OnTaskReply(spec, reply);
                                     },
                                     [this](const rpc::TaskSpec& spec, StoredObject::Error error,
                                            const std::string& message) {
                                       facade_->OnTaskFailure(spec, error, message);
                                     },
                                     [](const std::string&) {}, nullptr,
                                     [this](const rpc::TaskSpec& spec, const std::string& why) {
                                       facade_->OnTaskRetry(spec, why);
                                     }}) {
    objects_.SetIdentity(kSelf, NodeId::FromRandom());
    SubmissionFacade::Options options;
    options.warn = [this](const std::string& message) { warnings_.push_back(message); };
    options.task_events = &events_;
    facade_ = std::make_unique<SubmissionFacade>(options, &objects_, &submitter_, nullptr, nullptr,
                                                 &clock_);
    facade_->SetIdentity(kSelf, NodeId::FromRandom());
    objects_.SetReconstructor(facade_.get());
  }
  ~SubmissionFacadeTest() override { submitter_.Shutdown(); }

  ObjectRefInfo Submit(const std::string& name, int max_retries,
                       std::vector<TaskArgSpec> args = {}) {
    TaskSubmitOptions options;
    options.max_retries = max_retries;
    ObjectRefInfo ref = *facade_->SubmitTask(name, std::move(args), options);
    if (leases_.num_lease_requests() > granted_) {
      rpc::RequestWorkerLeaseReply granted;
      granted.set_lease_id("lease");
      granted.set_worker_address("127.0.0.1:9");
      leases_.ReplyLease(granted_++, granted);
    }
    return ref;
  }
  // Answers the latest push with `value`; returns the task it ran.
  rpc::TaskSpec AnswerLatest(const std::string& value) {
    const size_t index = pushes_.num_pushes() - 1;
    rpc::PushTaskRequest request = pushes_.push(index).request;
    pushes_.Reply(index, Ran(request, value));
    return request.task();
  }
  // What ObjectService does when a read finds every copy gone.
  void Lose(const ObjectId& id) {
    objects_.memory_store().Erase(id);
    facade_->Reconstruct(id, "is lost: its only copy was on node n1, which died");
  }
  std::optional<StoredObject> Stored(const ObjectId& id) {
    return objects_.memory_store().GetIfReady(id);
  }

  RecordingSink events_;  // before facade_: outlives it
  FakeClock clock_;
  ClientPool<RayletClient> raylets_;
  ClientPool<CoreWorkerClient> workers_;
  FakeLeaseClient leases_;
  FakeTaskPushClient pushes_;
  ObjectService objects_;
  TaskSubmitter submitter_;
  std::unique_ptr<SubmissionFacade> facade_;
  size_t granted_ = 0;
  std::vector<std::string> warnings_;
};

// Regression (issue 30 item 10): a task asking for a resource with an empty name was submitted,
// its lease refused and asked for again forever, and its Get never returned. Now nothing is
// submitted and the caller hears what is wrong, for tasks, actors and placement groups alike.
TEST_F(SubmissionFacadeTest, InvalidResourcesAreRefusedAtSubmissionNamingTheField) {
  TaskSubmitOptions options;
  options.resources = {{"", 1}};
  auto ref = facade_->SubmitTask("Step", {}, options);
  ASSERT_TRUE(absl::IsInvalidArgument(ref.status())) << ref.status();
  EXPECT_EQ(ref.status().message(),
            "task Step: resources has a resource with an empty name (amount 1); name every "
            "resource, e.g. {\"CPU\", 1}");
  EXPECT_EQ(leases_.num_lease_requests(), 0u);
  EXPECT_TRUE(events_.events().empty());  // not even recorded as submitted

  options.resources = {{"GPU", -2}};
  auto actor = facade_->CreateActor("Trainer::Create", {}, options, rpc::ActorInfo(), "default");
  ASSERT_TRUE(absl::IsInvalidArgument(actor.status())) << actor.status();
  EXPECT_TRUE(
      absl::StrContains(actor.status().message(), "actor Trainer::Create: resources['GPU'] is -2"))
      << actor.status();

  rpc::PlacementGroupInfo group;
  (*group.add_bundles()->mutable_resources())["CPU"] = 1;
  (*group.add_bundles()->mutable_resources())["GPU"] = 1.5;
  auto placed = facade_->CreatePlacementGroup(group);
  ASSERT_TRUE(absl::IsInvalidArgument(placed.status())) << placed.status();
  EXPECT_TRUE(
      absl::StrContains(placed.status().message(), "placement group bundles[1]['GPU'] is 1.5"))
      << placed.status();
}

TEST_F(SubmissionFacadeTest, LostResultRunsItsTaskAgainAndReadersGetTheNewValue) {
  ObjectRefInfo ref = Submit("MakeBytes", 3);
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  AnswerLatest("first");
  Lose(ref.id);
  EXPECT_FALSE(objects_.memory_store().IsReady(ref.id));  // readers wait for the rebuild
  ASSERT_EQ(pushes_.num_pushes(), 2u);
  EXPECT_EQ(pushes_.push(1).request.task().attempt(), 1);
  EXPECT_EQ(pushes_.push(1).request.task().function_name(), "MakeBytes");
  AnswerLatest("again");
  ASSERT_TRUE(Stored(ref.id).has_value());
  EXPECT_EQ(Stored(ref.id)->value.inline_value(), "again");
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_TRUE(absl::StrContains(warnings_[0], "rebuilding it")) << warnings_[0];
}

TEST_F(SubmissionFacadeTest, MaxRetriesZeroFailsTypedAndRunsNothing) {
  ObjectRefInfo ref = Submit("MakeBytes", 0);
  AnswerLatest("first");
  Lose(ref.id);
  EXPECT_EQ(pushes_.num_pushes(), 1u);
  ASSERT_TRUE(Stored(ref.id).has_value());
  EXPECT_EQ(Stored(ref.id)->error, StoredObject::Error::kReconstructionFailed);
  EXPECT_TRUE(absl::StrContains(Stored(ref.id)->error_message, ref.id.Hex()));
  EXPECT_TRUE(absl::StrContains(Stored(ref.id)->error_message, "max_retries is 0"));
  EXPECT_TRUE(absl::StrContains(Stored(ref.id)->error_message, "node n1, which died"));
}

TEST_F(SubmissionFacadeTest, PutObjectIsLostForGood) {
  auto ref = objects_.Put(3, [](char* out) { memcpy(out, "abc", 3); }, {});
  ASSERT_TRUE(ref.ok());
  Lose(ref->id);
  ASSERT_TRUE(Stored(ref->id).has_value());
  EXPECT_EQ(Stored(ref->id)->error, StoredObject::Error::kLost);
  EXPECT_TRUE(absl::StrContains(Stored(ref->id)->error_message, "created by Put"));
  EXPECT_EQ(pushes_.num_pushes(), 0u);
}

TEST_F(SubmissionFacadeTest, FreedArgumentIsRebuiltFirst) {
  ObjectRefInfo a = Submit("MakeBytes", 3);
  TaskArgSpec arg;
  arg.by_reference = true;
  arg.ref = a;
  // Submitted before `a` exists, so `a` travels by reference and `b` depends on it.
  ObjectRefInfo b = Submit("Reversed", 3, {arg});
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  AnswerLatest("a");
  ASSERT_EQ(pushes_.num_pushes(), 2u);
  ASSERT_FALSE(pushes_.push(1).request.task().args(0).object_id().empty());
  AnswerLatest("b");
  objects_.references().RemoveLocal(a.id);  // the driver dropped `a`; `b` ran, so it is freed
  EXPECT_FALSE(objects_.references().IsTracked(a.id));
  Lose(b.id);
  // `a` runs again first; `b` waits for it.
  ASSERT_EQ(pushes_.num_pushes(), 3u);
  EXPECT_EQ(pushes_.push(2).request.task().function_name(), "MakeBytes");
  EXPECT_EQ(pushes_.push(2).request.task().attempt(), 1);
  AnswerLatest("a again");
  ASSERT_EQ(pushes_.num_pushes(), 4u);
  EXPECT_EQ(pushes_.push(3).request.task().function_name(), "Reversed");
  AnswerLatest("b again");
  EXPECT_EQ(Stored(b.id)->value.inline_value(), "b again");
  // Once `b` is dropped, nothing is left: values, references and lineage.
  objects_.references().RemoveLocal(b.id);
  EXPECT_EQ(objects_.references().num_tracked(), 0u);
  EXPECT_EQ(facade_->lineage().num_entries(), 0u);
}

TEST_F(SubmissionFacadeTest, RerunThatCannotFinishFailsAsReconstructionFailed) {
  ObjectRefInfo ref = Submit("MakeBytes", 1);
  AnswerLatest("first");
  Lose(ref.id);
  ASSERT_EQ(pushes_.num_pushes(), 2u);
  pushes_.Reply(1, absl::UnavailableError("worker died"));  // the rerun's worker dies too
  ASSERT_TRUE(Stored(ref.id).has_value());
  EXPECT_EQ(Stored(ref.id)->error, StoredObject::Error::kReconstructionFailed);
  EXPECT_TRUE(absl::StrContains(Stored(ref.id)->error_message, "rebuilding it"))
      << Stored(ref.id)->error_message;
}

TEST_F(SubmissionFacadeTest, RecordsSubmissionRetriesAndTheOwnersFailureDecision) {
  Submit("Flaky", /*max_retries=*/1);
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  pushes_.Reply(0, absl::UnavailableError("connection reset"));  // the worker died
  if (leases_.num_lease_requests() > granted_) {
    rpc::RequestWorkerLeaseReply granted;
    granted.set_lease_id("lease2");
    granted.set_worker_address("127.0.0.1:10");
    leases_.ReplyLease(granted_++, granted);
  }
  ASSERT_EQ(pushes_.num_pushes(), 2u);
  pushes_.Reply(1, absl::UnavailableError("connection reset"));  // and again: no retries left

  std::vector<TaskStateEvent> events = events_.events();
  // One event per submission: PENDING_NODE_ASSIGNMENT carrying when it was SUBMITTED.
  const std::vector<std::pair<int, rpc::TaskEvent::State>> expected = {
      {0, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT},
      {0, rpc::TaskEvent::FAILED},
      {1, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT},
      {1, rpc::TaskEvent::FAILED}};
  ASSERT_EQ(events.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(events[i].attempt, expected[i].first) << i;
    EXPECT_EQ(events[i].state, expected[i].second) << i;
    EXPECT_EQ(events[i].task_id, events[0].task_id);
  }
  EXPECT_EQ(events[0].name, "Flaky");
  EXPECT_EQ(events[0].type, rpc::TaskSpec::NORMAL_TASK);
  EXPECT_NE(events[0].submitted_time, absl::InfinitePast());
  EXPECT_LE(events[0].submitted_time, events[0].time);
  EXPECT_EQ(events[2].name, "Flaky");  // the new attempt describes itself too
  EXPECT_NE(events[2].submitted_time, absl::InfinitePast());
  EXPECT_EQ(events[1].submitted_time, absl::InfinitePast());  // only first events carry it
  EXPECT_TRUE(absl::StrContains(events[1].error_message, "died")) << events[1].error_message;
  EXPECT_TRUE(absl::StrContains(events[3].error_message, "gave up after 2")) << events[3].error_message;
}

// Regression (issue 34 item 8): a task's SetName never reached its events, so `troupe list tasks`
// showed the function's name. The name given shows, on every attempt; without one, the function's.
TEST_F(SubmissionFacadeTest, EventsShowTheNameTheCallerGave) {
  TaskSubmitOptions options;
  options.name = "nightly-report";
  options.max_retries = 1;
  ASSERT_TRUE(facade_->SubmitTask("Report", {}, options).ok());
  rpc::RequestWorkerLeaseReply granted;
  granted.set_lease_id("lease");
  granted.set_worker_address("127.0.0.1:9");
  leases_.ReplyLease(granted_++, granted);
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  EXPECT_EQ(pushes_.push(0).request.task().name(), "nightly-report");
  pushes_.Reply(0, absl::UnavailableError("connection reset"));  // the worker died: a retry
  Submit("Unnamed", 0);
  std::vector<TaskStateEvent> events = events_.events();
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0].name, "nightly-report");
  EXPECT_EQ(events[2].attempt, 1);
  EXPECT_EQ(events[2].name, "nightly-report");
  EXPECT_EQ(events.back().name, "Unnamed");
}

TEST_F(SubmissionFacadeTest, ATaskWaitingForItsArgumentsIsPendingArgsFirst) {
  ObjectRefInfo first = Submit("First", 0);
  TaskArgSpec arg;
  arg.by_reference = true;
  arg.ref = first;
  Submit("Second", 0, {arg});
  std::vector<TaskStateEvent> events = events_.events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].name, "Second");
  EXPECT_EQ(events[1].state, rpc::TaskEvent::PENDING_ARGS_AVAIL);
  EXPECT_NE(events[1].submitted_time, absl::InfinitePast());
  AnswerLatest("value");  // First's result exists: Second goes to the submitter
  events = events_.events();
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[2].state, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT);
  EXPECT_EQ(events[2].task_id, events[1].task_id);
  EXPECT_EQ(events[2].submitted_time, absl::InfinitePast());
}

}  // namespace
}  // namespace troupe
