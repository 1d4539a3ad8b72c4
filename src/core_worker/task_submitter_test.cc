#include "src/core_worker/task_submitter.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "src/common/clock.h"
#include "src/rpc/fake_peer_clients.h"

namespace troupe {
namespace {

constexpr char kLocalRaylet[] = "local:1";

rpc::TaskSpec Task(const std::string& name, int max_retries = 3) {
  rpc::TaskSpec spec;
  spec.set_task_id(TaskId::FromRandom().Binary());
  spec.set_job_id("job");
  spec.set_function_name(name);
  spec.set_type(rpc::TaskSpec::NORMAL_TASK);
  (*spec.mutable_required_resources())["CPU"] = 1;
  spec.set_max_retries(max_retries);
  return spec;
}

rpc::RequestWorkerLeaseReply Granted(const std::string& lease_id, const std::string& worker) {
  rpc::RequestWorkerLeaseReply reply;
  reply.set_lease_id(lease_id);
  reply.set_worker_address(worker);
  return reply;
}

rpc::PushTaskReply Ran(const rpc::TaskSpec& spec, bool threw = false, int64_t run_us = 0) {
  rpc::PushTaskReply reply;
  reply.set_run_us(run_us);
  rpc::ReturnObject* ret = reply.add_returns();
  ret->set_object_id(ObjectId::FromIndex(*TaskId::FromBinary(spec.task_id()), 1).Binary());
  ret->set_is_application_error(threw);
  return reply;
}

// The peer clients' contract: a cancelled call's callback runs with CANCELLED. The fakes only
// record the cancellation; these answer it at once, on the cancelling thread.
class CancelAnsweringLeases : public LeaseClient {
 public:
  explicit CancelAnsweringLeases(FakeLeaseClient* fake) : fake_(fake) {}
  CallCanceller RequestWorkerLease(const std::string& raylet,
                                   const rpc::RequestWorkerLeaseRequest& r,
                                   LeaseCallback done) override {
    const size_t index = fake_->num_lease_requests();
    CallCanceller cancel = fake_->RequestWorkerLease(raylet, r, std::move(done));
    return [this, index, cancel] {
      cancel();
      fake_->ReplyLease(index, absl::CancelledError("cancelled"));
    };
  }
  void ReturnWorker(const std::string& raylet, const std::string& lease, bool disconnect) override {
    fake_->ReturnWorker(raylet, lease, disconnect);
  }
  absl::Status ReturnWorkerAndWait(const std::string& raylet, const std::string& lease,
                                   bool disconnect) override {
    returned_and_waited_.push_back(lease);
    return fake_->ReturnWorkerAndWait(raylet, lease, disconnect);
  }
  void KillLeasedWorker(const std::string& raylet, const std::string& lease,
                        KillCallback done) override {
    fake_->KillLeasedWorker(raylet, lease, std::move(done));
  }
  std::vector<std::string> returned_and_waited_;

 private:
  FakeLeaseClient* fake_;
};

class CancelAnsweringPushes : public TaskPushClient {
 public:
  explicit CancelAnsweringPushes(FakeTaskPushClient* fake) : fake_(fake) {}
  CallCanceller PushTask(const std::string& worker, rpc::PushTaskRequest request,
                         PushCallback done) override {
    const size_t index = fake_->num_pushes();
    CallCanceller cancel = fake_->PushTask(worker, std::move(request), std::move(done));
    return [this, index, cancel] {
      cancel();
      fake_->Reply(index, absl::CancelledError("cancelled"));
    };
  }
  void CancelTask(const std::string& worker, const std::string& task_id, bool recursive) override {
    fake_->CancelTask(worker, task_id, recursive);
  }
  CallCanceller PushTasks(const std::string& worker, rpc::PushTasksRequest request,
                          PushResultsCallback done) override {
    const size_t first = fake_->num_pushes();
    const size_t count = request.pushes_size();
    CallCanceller cancel = fake_->PushTasks(worker, std::move(request), std::move(done));
    return [this, first, count, cancel] {
      cancel();
      for (size_t index = first; index < first + count; ++index) {
        if (fake_->pending(index)) fake_->Reply(index, absl::CancelledError("cancelled"));
      }
    };
  }

 private:
  FakeTaskPushClient* fake_;
};

class TaskSubmitterTest : public ::testing::Test {
 protected:
  TaskSubmitterTest() : submitter_(Options(), &leases_, &pushes_, &clock_, Callbacks()) {}

  static TaskSubmitterOptions Options() {
    TaskSubmitterOptions options;
    options.local_raylet_address = kLocalRaylet;
    options.lease_linger = absl::Milliseconds(50);
    options.infeasible_retry = absl::Milliseconds(1000);
    return options;
  }
  TaskSubmitter::Callbacks Callbacks() {
    TaskSubmitter::Callbacks callbacks{
        [this](const rpc::TaskSpec& spec, rpc::PushTaskReply) {
          replies_.push_back(spec.function_name());
        },
        [this](const rpc::TaskSpec& spec, StoredObject::Error error, const std::string& m) {
          failures_.push_back({spec.function_name(), error, m});
        },
        [this](const std::string& message) { warnings_.push_back(message); },
        [this](const std::string& worker) -> std::optional<std::string> {
          auto it = oom_causes_.find(worker);
          if (it == oom_causes_.end()) return std::nullopt;
          return it->second;
        }};
    callbacks.wake_timer = [this] { ++timer_wakes_; };
    return callbacks;
  }
  // Grants lease request `index` with a worker at `worker`.
  void Grant(size_t index, const std::string& worker, const std::string& lease_id = "lease") {
    leases_.ReplyLease(index, Granted(lease_id, worker));
  }

  struct Failure {
    std::string function_name;
    StoredObject::Error error;
    std::string message;
  };
  FakeClock clock_;
  FakeLeaseClient leases_;
  FakeTaskPushClient pushes_;
  std::vector<std::string> replies_;
  std::vector<Failure> failures_;
  std::vector<std::string> warnings_;
  std::map<std::string, std::string> oom_causes_;  // worker address -> the memory monitor's why
  int timer_wakes_ = 0;
  TaskSubmitter submitter_;
};

TEST_F(TaskSubmitterTest, LeaseGoesToTheLocalRayletWithTheTasksResources) {
  submitter_.Submit(Task("f"));
  ASSERT_EQ(leases_.num_lease_requests(), 1u);
  const auto call = leases_.lease_request(0);
  EXPECT_EQ(call.raylet_address, kLocalRaylet);
  EXPECT_FALSE(call.request.grant_or_reject());
  EXPECT_EQ(call.request.resource_spec().required_resources().at("CPU"), 1);
  EXPECT_EQ(call.request.resource_spec().job_id(), "job");
}

// The raylet returns a lease whose owner (the submitting process) died: the request names it.
TEST_F(TaskSubmitterTest, LeaseRequestNamesItsOwner) {
  rpc::TaskSpec spec = Task("f");
  spec.set_caller_worker_id("the-submitter");
  submitter_.Submit(spec);
  ASSERT_EQ(leases_.num_lease_requests(), 1u);
  EXPECT_EQ(leases_.lease_request(0).request.resource_spec().caller_worker_id(), "the-submitter");
}

// A worker leased on a node matching one label selector never runs a task with another: each
// selector gets its own lease request, carrying it.
TEST_F(TaskSubmitterTest, TasksWithDifferentLabelSelectorsLeaseSeparately) {
  auto with_zone = [](const std::string& name, const std::string& zone) {
    rpc::TaskSpec spec = Task(name);
    rpc::LabelConstraint* c = spec.mutable_strategy()->mutable_label_selector()->add_constraints();
    c->set_key("zone");
    c->add_values(zone);
    return spec;
  };
  submitter_.Submit(with_zone("in_a", "a"));
  submitter_.Submit(with_zone("in_b", "b"));
  ASSERT_EQ(leases_.num_lease_requests(), 2u);
  EXPECT_EQ(leases_.lease_request(0)
                .request.resource_spec()
                .strategy()
                .label_selector()
                .constraints(0)
                .values(0),
            "a");
  EXPECT_EQ(leases_.lease_request(1)
                .request.resource_spec()
                .strategy()
                .label_selector()
                .constraints(0)
                .values(0),
            "b");
  Grant(0, "worker-in-a:1");
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  EXPECT_EQ(pushes_.push(0).request.task().function_name(), "in_a");
}

TEST_F(TaskSubmitterTest, GrantedLeaseGetsTheTaskPushedToItsWorker) {
  rpc::TaskSpec spec = Task("f");
  submitter_.Submit(spec);
  rpc::RequestWorkerLeaseReply reply = Granted("lease-1", "worker:7");
  reply.add_gpu_ids(3);
  leases_.ReplyLease(0, reply);
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  const auto push = pushes_.push(0);
  EXPECT_EQ(push.worker_address, "worker:7");
  EXPECT_EQ(push.request.task().task_id(), spec.task_id());
  ASSERT_EQ(push.request.gpu_ids_size(), 1);
  EXPECT_EQ(push.request.gpu_ids(0), 3);
  pushes_.Reply(0, Ran(spec));
  EXPECT_EQ(replies_, (std::vector<std::string>{"f"}));
  EXPECT_EQ(submitter_.counters().submitted, 1);
  EXPECT_EQ(submitter_.counters().finished, 1);
  EXPECT_EQ(submitter_.counters().failed, 0);
}

TEST_F(TaskSubmitterTest, SpillbackAsksTheNamedRayletToGrantOrReject) {
  submitter_.Submit(Task("f"));
  rpc::RequestWorkerLeaseReply spill;
  spill.set_retry_at_raylet_address("other:2");
  leases_.ReplyLease(0, spill);
  ASSERT_EQ(leases_.num_lease_requests(), 2u);
  EXPECT_EQ(leases_.lease_request(1).raylet_address, "other:2");
  EXPECT_TRUE(leases_.lease_request(1).request.grant_or_reject());
  Grant(1, "worker:1");
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  EXPECT_EQ(pushes_.push(0).worker_address, "worker:1");
}

TEST_F(TaskSubmitterTest, RejectedLeaseStartsOverAtTheLocalRaylet) {
  submitter_.Submit(Task("f"));
  rpc::RequestWorkerLeaseReply spill;
  spill.set_retry_at_raylet_address("other:2");
  leases_.ReplyLease(0, spill);
  rpc::RequestWorkerLeaseReply rejected;  // the other node filled up meanwhile
  rejected.set_rejected(true);
  leases_.ReplyLease(1, rejected);
  ASSERT_EQ(leases_.num_lease_requests(), 3u);
  EXPECT_EQ(leases_.lease_request(2).raylet_address, kLocalRaylet);
  EXPECT_FALSE(leases_.lease_request(2).request.grant_or_reject());
  EXPECT_TRUE(failures_.empty());
}

TEST_F(TaskSubmitterTest, RejectionWithAReasonFailsTheQueuedTasks) {
  submitter_.Submit(Task("f"));
  rpc::RequestWorkerLeaseReply rejected;
  rejected.set_rejected(true);
  rejected.set_failure_message("the placement group was removed");
  leases_.ReplyLease(0, rejected);
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kTaskFailed);
  EXPECT_NE(failures_[0].message.find("the placement group was removed"), std::string::npos);
  EXPECT_EQ(submitter_.counters().failed, 1);
}

// Regression (issue 30 item 10): a lease request the raylet refused as invalid (an empty
// resource name) was retried forever and the task's Get never returned.
TEST_F(TaskSubmitterTest, ALeaseRequestRefusedAsInvalidFailsTheTasksInsteadOfRetrying) {
  submitter_.Submit(Task("f"));
  leases_.ReplyLease(0, absl::InvalidArgumentError(
                            "resource_spec.required_resources has a resource with an empty name"));
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kTaskFailed);
  EXPECT_NE(failures_[0].message.find("empty name"), std::string::npos) << failures_[0].message;
  clock_.Advance(absl::Seconds(10));
  submitter_.Tick();
  EXPECT_EQ(leases_.num_lease_requests(), 1u);  // not asked again
}

TEST_F(TaskSubmitterTest, UnreachableRayletIsRetriedAfterTheRetryInterval) {
  submitter_.Submit(Task("f"));
  leases_.ReplyLease(0, absl::UnavailableError("connection refused"));
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("connection refused"), std::string::npos);
  submitter_.Tick();
  EXPECT_EQ(leases_.num_lease_requests(), 1u);
  clock_.Advance(absl::Milliseconds(1000));
  submitter_.Tick();
  ASSERT_EQ(leases_.num_lease_requests(), 2u);
  EXPECT_EQ(leases_.lease_request(1).raylet_address, kLocalRaylet);
}

TEST_F(TaskSubmitterTest, InfeasibleTaskWarnsOnceAndRetriesOnlyAfterTheInterval) {
  submitter_.Submit(Task("f"));
  rpc::RequestWorkerLeaseReply infeasible;
  infeasible.set_infeasible(true);
  infeasible.set_failure_message("no node has 1 CPU");
  leases_.ReplyLease(0, infeasible);
  ASSERT_EQ(warnings_.size(), 1u);
  EXPECT_NE(warnings_[0].find("no node has 1 CPU"), std::string::npos);
  clock_.Advance(absl::Milliseconds(999));
  submitter_.Tick();
  EXPECT_EQ(leases_.num_lease_requests(), 1u);
  clock_.Advance(absl::Milliseconds(1));
  submitter_.Tick();
  ASSERT_EQ(leases_.num_lease_requests(), 2u);
  leases_.ReplyLease(1, infeasible);
  EXPECT_EQ(warnings_.size(), 1u);  // still one warning
  clock_.Advance(absl::Milliseconds(1000));
  submitter_.Tick();
  ASSERT_EQ(leases_.num_lease_requests(), 3u);
  Grant(2, "worker:1");  // a node that fits joined
  EXPECT_EQ(pushes_.num_pushes(), 1u);
  EXPECT_TRUE(failures_.empty());
}

TEST_F(TaskSubmitterTest, ShortTasksArePipelinedToOneWorkerTwoCallsAtATime) {
  ASSERT_EQ(Options().max_calls_in_flight_per_worker, 2);
  rpc::TaskSpec first = Task("first");
  submitter_.Submit(first);
  Grant(0, "worker:1");
  pushes_.Reply(0, Ran(first));  // it ran 0 µs: the queue's tasks are short
  std::vector<rpc::TaskSpec> specs;
  for (int i = 0; i < 4; ++i) {
    specs.push_back(Task("short"));
    submitter_.Submit(specs.back());
  }
  // Two calls in flight, a task each (as they came); the other two wait for one to end.
  ASSERT_EQ(pushes_.num_pushes(), 3u);
  EXPECT_EQ(pushes_.num_batches(), 0);
  pushes_.Reply(1, Ran(specs[0]));
  ASSERT_EQ(pushes_.num_pushes(), 5u);  // the two that waited, in one call
  EXPECT_EQ(pushes_.num_batches(), 1);
  EXPECT_EQ(pushes_.push(3).batch, pushes_.push(4).batch);
  for (size_t i = 1; i < 5; ++i) EXPECT_EQ(pushes_.push(i).worker_address, "worker:1");
  // Each push says its place in the lease's order, across calls (the worker runs them in it).
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(pushes_.push(i).request.lease_id(), "lease");
    EXPECT_EQ(pushes_.push(i).request.lease_sequence(), static_cast<int64_t>(i));
  }
  for (size_t i = 2; i < 5; ++i) pushes_.Reply(i, Ran(specs[i - 1]));
  EXPECT_EQ(submitter_.counters().finished, 5);
}

// Makes worker:1's queue pipelined (a task that ran 0 µs), then fills its window of calls
// with one task each; returns how many pushes were made.
size_t FillTheWindow(TaskSubmitter& submitter, FakeLeaseClient& leases, FakeTaskPushClient& pushes,
                     int window) {
  rpc::TaskSpec first = Task("first");
  submitter.Submit(first);
  leases.ReplyLease(0, Granted("lease-1", "worker:1"));
  pushes.Reply(0, Ran(first));
  for (int i = 0; i < window; ++i) submitter.Submit(Task("filler"));
  return pushes.num_pushes();
}

TEST_F(TaskSubmitterTest, TasksToppingUpAWorkerTravelInOneCallAndEachOutcomeStandsAlone) {
  const int window = Options().max_calls_in_flight_per_worker;
  const size_t filled = FillTheWindow(submitter_, leases_, pushes_, window);
  ASSERT_EQ(filled, static_cast<size_t>(window + 1));
  EXPECT_EQ(pushes_.num_batches(), 0);  // one plain PushTask each
  std::vector<rpc::TaskSpec> queued;
  for (const char* name : {"a", "b", "c"}) {
    queued.push_back(Task(name));
    submitter_.Submit(queued.back());
  }
  EXPECT_EQ(pushes_.num_pushes(), filled);  // the worker's window is full: they wait
  pushes_.Reply(1, Ran(pushes_.push(1).request.task()));
  // A call ended: the three go, in order, in one call.
  ASSERT_EQ(pushes_.num_pushes(), filled + 3);
  EXPECT_EQ(pushes_.num_batches(), 1);
  for (size_t i = 0; i < 3; ++i) {
    const auto push = pushes_.push(filled + i);
    EXPECT_EQ(push.batch, 0);  // the first PushTasks call
    EXPECT_EQ(push.index_in_batch, i);
    EXPECT_EQ(push.request.task().task_id(), queued[i].task_id());
  }
  // Partial results: a's result arrives, then the call ends without b's and c's (the worker
  // died mid-batch): a stands, b and c are retried on their own.
  pushes_.ReplyTogether({{filled, Ran(queued[0])}});
  EXPECT_EQ(replies_.back(), "a");
  pushes_.ReplyTogether({{filled + 1, absl::UnavailableError("stream ended")},
                         {filled + 2, absl::UnavailableError("stream ended")}});
  EXPECT_TRUE(failures_.empty());
  EXPECT_EQ(submitter_.counters().retried, 2);
  ASSERT_EQ(leases_.returned_workers().size(), 1u);  // the dead worker's lease, once
  EXPECT_TRUE(leases_.returned_workers()[0].disconnect);
  // The three asked for workers while they waited (1 + 3 requests); those serve the retries.
  EXPECT_EQ(leases_.num_lease_requests(), 4u);
  Grant(1, "worker:2", "lease-2");
  ASSERT_EQ(pushes_.num_pushes(), filled + 5);  // both to the new worker, in one call
  for (size_t i : {filled + 3, filled + 4}) {
    EXPECT_EQ(pushes_.push(i).worker_address, "worker:2");
    EXPECT_EQ(pushes_.push(i).request.task().attempt(), 1);
    EXPECT_EQ(pushes_.push(i).batch, pushes_.push(filled + 3).batch);
  }
}

TEST_F(TaskSubmitterTest, AFailedBatchRetriesCancelsAndFailsEachTaskOnItsOwn) {
  const size_t filled =
      FillTheWindow(submitter_, leases_, pushes_, Options().max_calls_in_flight_per_worker);
  rpc::TaskSpec retried = Task("retried", /*max_retries=*/1);
  rpc::TaskSpec cancelled = Task("cancelled", /*max_retries=*/1);
  rpc::TaskSpec failed = Task("failed", /*max_retries=*/0);
  for (const auto& spec : {retried, cancelled, failed}) submitter_.Submit(spec);
  pushes_.Reply(1, Ran(pushes_.push(1).request.task()));
  ASSERT_EQ(pushes_.num_pushes(), filled + 3);  // the three in one call
  EXPECT_TRUE(submitter_.Cancel(*TaskId::FromBinary(cancelled.task_id()), /*force=*/true));
  ASSERT_EQ(leases_.killed_workers().size(), 1u);
  // The kill ends the whole call: every task of it gets the error.
  pushes_.ReplyTogether({{filled, absl::UnavailableError("worker killed")},
                         {filled + 1, absl::UnavailableError("worker killed")},
                         {filled + 2, absl::UnavailableError("worker killed")}});
  ASSERT_EQ(failures_.size(), 2u);
  EXPECT_EQ(failures_[0].function_name, "cancelled");
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kCancelled);
  EXPECT_EQ(failures_[1].function_name, "failed");
  EXPECT_EQ(failures_[1].error, StoredObject::Error::kTaskFailed);
  EXPECT_NE(failures_[1].message.find("gave up after 1 attempt(s)"), std::string::npos);
  EXPECT_EQ(submitter_.counters().retried, 1);  // "retried" only
  EXPECT_EQ(leases_.returned_workers().size(), 1u);
}

TEST_F(TaskSubmitterTest, NodeDeathCancelsAWholeBatch) {
  const size_t filled =
      FillTheWindow(submitter_, leases_, pushes_, Options().max_calls_in_flight_per_worker);
  for (int i = 0; i < 2; ++i) submitter_.Submit(Task("queued"));
  pushes_.Reply(1, Ran(pushes_.push(1).request.task()));
  ASSERT_EQ(pushes_.num_pushes(), filled + 2);
  // worker:1's node (unknown ID: fenced by its raylet's address, the local one here).
  submitter_.OnNodeDead(NodeId::FromRandom(), kLocalRaylet);
  EXPECT_TRUE(pushes_.push(filled).cancelled);
  EXPECT_TRUE(pushes_.push(filled + 1).cancelled);
}

TEST_F(TaskSubmitterTest, LongTasksGoOnePerWorker) {
  rpc::TaskSpec first = Task("first");
  submitter_.Submit(first);
  Grant(0, "worker:1");
  pushes_.Reply(0, Ran(first, /*threw=*/false, /*run_us=*/100000));  // 100 ms: not worth it
  submitter_.Submit(Task("long"));
  submitter_.Submit(Task("long"));
  EXPECT_EQ(pushes_.num_pushes(), 2u);          // one to the idle worker
  EXPECT_EQ(leases_.num_lease_requests(), 2u);  // and a lease for the other
}

// A worker's backlog is about max_backlog_ms of run time: a queue of 0.5 ms tasks (2 ms
// budget) never has more than 4 in flight to a worker, however long the round trip (the network
// is not the worker's backlog), and the worker is topped up several tasks to a call.
TEST_F(TaskSubmitterTest, AWorkersBacklogIsBoundedByRunTimeNotCount) {
  ASSERT_EQ(Options().max_backlog_ms, 2.0);
  rpc::TaskSpec first = Task("first");
  submitter_.Submit(first);
  Grant(0, "worker:1");
  for (int i = 0; i < 20; ++i) submitter_.Submit(Task("half_ms"));
  EXPECT_EQ(pushes_.num_pushes(), 1u);     // run time not known yet: one at a time
  clock_.Advance(absl::Milliseconds(50));  // a slow link
  pushes_.Reply(0, Ran(first, /*threw=*/false, /*run_us=*/500));
  size_t answered = 1, most_in_flight = 0;
  while (answered < pushes_.num_pushes()) {
    most_in_flight = std::max(most_in_flight, pushes_.num_pushes() - answered);
    clock_.Advance(absl::Milliseconds(50));
    pushes_.Reply(answered, Ran(pushes_.push(answered).request.task(), false, 500));
    ++answered;
  }
  EXPECT_EQ(answered, 21u);  // every task ran on worker:1 (the other leases were not granted)
  EXPECT_EQ(most_in_flight, 4u);
  EXPECT_GT(pushes_.num_batches(), 0);
}

// Shorter tasks from some point on: the moving average follows and the pipeline deepens to
// max_tasks_in_flight_per_worker.
TEST_F(TaskSubmitterTest, APipelineDeepensAsTheTasksGetShorter) {
  rpc::TaskSpec first = Task("first");
  submitter_.Submit(first);
  Grant(0, "worker:1");
  pushes_.Reply(0, Ran(first, /*threw=*/false, /*run_us=*/1000));  // 1 ms: 2 in flight
  const size_t most = Options().max_tasks_in_flight_per_worker;
  for (size_t i = 0; i < 4 * most; ++i) submitter_.Submit(Task("short"));
  EXPECT_EQ(pushes_.num_pushes(), 3u);  // the first, then 2 in flight
  size_t answered = 1, most_in_flight = 0;
  while (answered < pushes_.num_pushes()) {
    most_in_flight = std::max(most_in_flight, pushes_.num_pushes() - answered);
    pushes_.Reply(answered, Ran(pushes_.push(answered).request.task(), false, /*run_us=*/1));
    ++answered;
  }
  EXPECT_EQ(answered, 4 * most + 1);
  EXPECT_EQ(most_in_flight, most);
}

TEST_F(TaskSubmitterTest, TaskOfADeadWorkerIsRetriedOnANewLeaseThenFails) {
  rpc::TaskSpec spec = Task("f", /*max_retries=*/1);
  submitter_.Submit(spec);
  Grant(0, "worker:1", "lease-1");
  pushes_.Reply(0, absl::UnavailableError("worker died"));
  // The dead worker's lease is returned (disconnect), and a new one requested.
  ASSERT_EQ(leases_.returned_workers().size(), 1u);
  EXPECT_EQ(leases_.returned_workers()[0].lease_id, "lease-1");
  EXPECT_TRUE(leases_.returned_workers()[0].disconnect);
  ASSERT_EQ(leases_.num_lease_requests(), 2u);
  Grant(1, "worker:2", "lease-2");
  ASSERT_EQ(pushes_.num_pushes(), 2u);
  EXPECT_EQ(pushes_.push(1).worker_address, "worker:2");
  EXPECT_EQ(pushes_.push(1).request.task().attempt(), 1);
  pushes_.Reply(1, absl::UnavailableError("worker died again"));
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kTaskFailed);
  EXPECT_NE(failures_[0].message.find("gave up after 2 attempt(s)"), std::string::npos);
  EXPECT_NE(failures_[0].message.find("worker died again"), std::string::npos);
  EXPECT_EQ(submitter_.counters().submitted, 1);
  EXPECT_EQ(submitter_.counters().retried, 1);
  EXPECT_EQ(submitter_.counters().failed, 1);
  EXPECT_EQ(leases_.num_lease_requests(), 2u);
}

TEST_F(TaskSubmitterTest, TaskOfAWorkerKilledForMemoryIsRetriedThenFailsAsOutOfMemory) {
  rpc::TaskSpec spec = Task("f", /*max_retries=*/1);
  submitter_.Submit(spec);
  Grant(0, "worker:1", "lease-1");
  oom_causes_["worker:1"] = "node n1 ran out of memory (99% in use, over the 90% threshold)";
  pushes_.Reply(0, absl::UnavailableError("socket closed"));
  EXPECT_TRUE(failures_.empty()) << "it has a retry left";
  ASSERT_EQ(leases_.num_lease_requests(), 2u);
  Grant(1, "worker:2", "lease-2");
  oom_causes_["worker:2"] = "node n1 ran out of memory (98% in use, over the 90% threshold)";
  pushes_.Reply(1, absl::UnavailableError("socket closed"));
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kOutOfMemory);
  EXPECT_NE(failures_[0].message.find("task f ran out of memory: node n1 ran out of memory (98%"),
            std::string::npos)
      << failures_[0].message;
  EXPECT_NE(failures_[0].message.find("gave up after 2 attempt(s)"), std::string::npos);
}

TEST_F(TaskSubmitterTest, ApplicationErrorIsNotRetriedByDefault) {
  rpc::TaskSpec spec = Task("throws");
  submitter_.Submit(spec);
  Grant(0, "worker:1");
  pushes_.Reply(0, Ran(spec, /*threw=*/true));
  EXPECT_EQ(replies_, (std::vector<std::string>{"throws"}));  // the exception is the result
  EXPECT_EQ(pushes_.num_pushes(), 1u);
  EXPECT_EQ(submitter_.counters().failed, 1);
  EXPECT_EQ(submitter_.counters().retried, 0);
}

TEST_F(TaskSubmitterTest, ApplicationErrorIsRetriedWithRetryExceptions) {
  rpc::TaskSpec spec = Task("throws", /*max_retries=*/1);
  spec.set_retry_exceptions(true);
  submitter_.Submit(spec);
  Grant(0, "worker:1");
  pushes_.Reply(0, Ran(spec, /*threw=*/true));
  EXPECT_TRUE(replies_.empty());
  ASSERT_EQ(pushes_.num_pushes(), 2u);  // the lease is still held: straight to the worker
  rpc::TaskSpec retried = pushes_.push(1).request.task();
  EXPECT_EQ(retried.attempt(), 1);
  pushes_.Reply(1, Ran(retried, /*threw=*/true));  // out of retries: the exception is the result
  EXPECT_EQ(replies_, (std::vector<std::string>{"throws"}));
  EXPECT_EQ(submitter_.counters().retried, 1);
}

TEST_F(TaskSubmitterTest, IdleLeaseIsReturnedAfterTheLingerAndNotBefore) {
  rpc::TaskSpec spec = Task("f");
  submitter_.Submit(spec);
  Grant(0, "worker:1", "lease-1");
  pushes_.Reply(0, Ran(spec));
  clock_.Advance(absl::Milliseconds(49));
  submitter_.Tick();
  EXPECT_TRUE(leases_.returned_workers().empty());
  clock_.Advance(absl::Milliseconds(1));
  submitter_.Tick();
  ASSERT_EQ(leases_.returned_workers().size(), 1u);
  EXPECT_EQ(leases_.returned_workers()[0].lease_id, "lease-1");
  EXPECT_EQ(leases_.returned_workers()[0].raylet_address, kLocalRaylet);
  EXPECT_FALSE(leases_.returned_workers()[0].disconnect);
}

TEST_F(TaskSubmitterTest, TickIsNeededFromTheFirstTaskUntilTheLastLeaseIsReturned) {
  EXPECT_FALSE(submitter_.NeedsTick());  // nothing queued, nothing leased: the timer may sleep
  rpc::TaskSpec spec = Task("f");
  submitter_.Submit(spec);
  EXPECT_TRUE(submitter_.NeedsTick());  // a task waits for a lease
  EXPECT_GE(timer_wakes_, 1);           // and the sleeping timer was told
  Grant(0, "worker:1", "lease-1");
  EXPECT_TRUE(submitter_.NeedsTick());  // running
  const int wakes = timer_wakes_;
  pushes_.Reply(0, Ran(spec));
  EXPECT_TRUE(submitter_.NeedsTick());  // idle, lingering: only Tick() returns it
  EXPECT_GT(timer_wakes_, wakes);       // the linger started: told again
  clock_.Advance(absl::Milliseconds(50));
  submitter_.Tick();
  EXPECT_EQ(leases_.returned_workers().size(), 1u);
  EXPECT_FALSE(submitter_.NeedsTick());
  submitter_.Submit(Task("g"));  // new work after sleeping: told again
  EXPECT_TRUE(submitter_.NeedsTick());
  EXPECT_GT(timer_wakes_, wakes + 1);
}

TEST_F(TaskSubmitterTest, BusyLeaseIsKept) {
  submitter_.Submit(Task("f"));
  Grant(0, "worker:1");
  clock_.Advance(absl::Seconds(10));  // running all along
  submitter_.Tick();
  EXPECT_TRUE(leases_.returned_workers().empty());
}

TEST_F(TaskSubmitterTest, CancelDropsAQueuedTask) {
  rpc::TaskSpec spec = Task("f");
  submitter_.Submit(spec);
  EXPECT_TRUE(submitter_.Cancel(*TaskId::FromBinary(spec.task_id()), /*force=*/false));
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kCancelled);
  Grant(0, "worker:1");
  EXPECT_EQ(pushes_.num_pushes(), 0u);  // nothing left to push
  EXPECT_FALSE(submitter_.Cancel(TaskId::FromRandom(), /*force=*/true));
}

TEST_F(TaskSubmitterTest, ForceCancelKillsTheRunningTasksWorker) {
  rpc::TaskSpec spec = Task("f");
  submitter_.Submit(spec);
  Grant(0, "worker:1", "lease-1");
  EXPECT_TRUE(submitter_.Cancel(*TaskId::FromBinary(spec.task_id()), /*force=*/true));
  EXPECT_TRUE(pushes_.cancels().empty());  // killed, not asked
  ASSERT_EQ(leases_.killed_workers().size(), 1u);
  EXPECT_EQ(leases_.killed_workers()[0].second, "lease-1");
  pushes_.Reply(0, absl::UnavailableError("worker killed"));
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kCancelled);
  EXPECT_EQ(leases_.num_lease_requests(), 1u);  // not retried
}

TEST_F(TaskSubmitterTest, CancelTellsTheRunningTasksWorkerAndFailsTheTaskAsCancelled) {
  rpc::TaskSpec spec = Task("f");
  spec.set_max_retries(3);
  submitter_.Submit(spec);
  Grant(0, "worker:1", "lease-1");
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  EXPECT_TRUE(submitter_.Cancel(*TaskId::FromBinary(spec.task_id()), /*force=*/false,
                                /*recursive=*/true));
  EXPECT_TRUE(leases_.killed_workers().empty());  // not force: the worker lives
  ASSERT_EQ(pushes_.cancels().size(), 1u);
  EXPECT_EQ(pushes_.cancels()[0].worker_address, "worker:1");
  EXPECT_EQ(pushes_.cancels()[0].task_id, spec.task_id());
  EXPECT_TRUE(pushes_.cancels()[0].recursive);
  // The worker answers: the task saw IsCancelled (or was skipped in its queue).
  rpc::PushTaskReply reply;
  reply.set_cancelled(true);
  pushes_.Reply(0, reply);
  EXPECT_TRUE(replies_.empty());
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kCancelled);
  EXPECT_EQ(leases_.num_lease_requests(), 1u);  // never retried
  // Finished: cancelling again does nothing.
  EXPECT_FALSE(submitter_.Cancel(*TaskId::FromBinary(spec.task_id()), /*force=*/false));
  EXPECT_EQ(pushes_.cancels().size(), 1u);
}

// ---- A node declared dead (a partition: its workers answer nothing) ----

rpc::RequestWorkerLeaseReply GrantedOn(const NodeId& node, const std::string& lease_id,
                                       const std::string& worker) {
  rpc::RequestWorkerLeaseReply reply = Granted(lease_id, worker);
  reply.set_node_id(node.Binary());
  return reply;
}

TEST_F(TaskSubmitterTest, NodeDeathCancelsItsPushesAndRetriesTheirTasksElsewhere) {
  const NodeId dead = NodeId::FromRandom();
  submitter_.Submit(Task("f", /*max_retries=*/1));
  leases_.ReplyLease(0, GrantedOn(dead, "lease-1", "worker:1"));
  ASSERT_EQ(pushes_.num_pushes(), 1u);
  submitter_.OnNodeDead(dead, "dead-raylet:3");
  EXPECT_TRUE(pushes_.push(0).cancelled);  // not left waiting for a silent node
  pushes_.Reply(0, absl::CancelledError("cancelled"));
  EXPECT_TRUE(failures_.empty());
  ASSERT_EQ(leases_.num_lease_requests(), 2u);  // retried on a new lease
  EXPECT_EQ(leases_.lease_request(1).raylet_address, kLocalRaylet);
  EXPECT_TRUE(leases_.returned_workers().empty());  // nothing is sent to the dead node
  Grant(1, "worker:2", "lease-2");
  ASSERT_EQ(pushes_.num_pushes(), 2u);
  EXPECT_EQ(pushes_.push(1).worker_address, "worker:2");
  EXPECT_EQ(pushes_.push(1).request.task().attempt(), 1);
  pushes_.Reply(1, Ran(pushes_.push(1).request.task()));
  EXPECT_EQ(replies_, (std::vector<std::string>{"f"}));
}

TEST_F(TaskSubmitterTest, LateReplyFromADeadNodeIsRefusedAndTheFailureStands) {
  const NodeId dead = NodeId::FromRandom();
  rpc::TaskSpec spec = Task("f", /*max_retries=*/0);
  submitter_.Submit(spec);
  leases_.ReplyLease(0, GrantedOn(dead, "lease-1", "worker:1"));
  submitter_.OnNodeDead(dead, "dead-raylet:3");
  // The node comes back and its worker's result arrives (it raced the cancellation).
  pushes_.Reply(0, Ran(spec));
  EXPECT_TRUE(replies_.empty());
  ASSERT_EQ(failures_.size(), 1u);
  EXPECT_EQ(failures_[0].error, StoredObject::Error::kTaskFailed);
  EXPECT_NE(failures_[0].message.find("declared dead"), std::string::npos);
  EXPECT_NE(failures_[0].message.find("gave up after 1 attempt(s)"), std::string::npos);
  // The dead node's worker is never used again.
  submitter_.Submit(Task("g"));
  EXPECT_EQ(pushes_.num_pushes(), 1u);
  EXPECT_EQ(leases_.num_lease_requests(), 2u);
}

TEST_F(TaskSubmitterTest, LeaseRequestToADeadNodeIsCancelledAndItsGrantRefused) {
  const NodeId dead = NodeId::FromRandom();
  submitter_.Submit(Task("f"));
  rpc::RequestWorkerLeaseReply spill;
  spill.set_retry_at_raylet_address("dead-raylet:3");
  leases_.ReplyLease(0, spill);
  ASSERT_EQ(leases_.num_lease_requests(), 2u);
  submitter_.OnNodeDead(dead, "dead-raylet:3");
  EXPECT_TRUE(leases_.lease_request(1).cancelled);
  leases_.ReplyLease(1, GrantedOn(dead, "lease-1", "worker:1"));  // a grant that raced it
  EXPECT_EQ(pushes_.num_pushes(), 0u);
  ASSERT_EQ(leases_.num_lease_requests(), 3u);  // starts over at the local raylet
  EXPECT_EQ(leases_.lease_request(2).raylet_address, kLocalRaylet);
  rpc::RequestWorkerLeaseReply spill_again;  // a stale cluster view spills to it again
  spill_again.set_retry_at_raylet_address("dead-raylet:3");
  leases_.ReplyLease(2, spill_again);
  // Not followed: asked again at the local raylet after the retry interval (its view catches up).
  EXPECT_EQ(leases_.num_lease_requests(), 3u);
  clock_.Advance(absl::Seconds(1));
  submitter_.Tick();
  ASSERT_EQ(leases_.num_lease_requests(), 4u);
  EXPECT_EQ(leases_.lease_request(3).raylet_address, kLocalRaylet);
  EXPECT_TRUE(failures_.empty());
}

TEST_F(TaskSubmitterTest, PushStartedAfterItsNodeDiedIsCancelledAtOnce) {
  const NodeId dead = NodeId::FromRandom();
  submitter_.Submit(Task("f"));
  submitter_.OnNodeDead(dead, "dead-raylet:3");
  // A grant from the node, received from the local raylet before it learned of the death.
  leases_.ReplyLease(0, GrantedOn(dead, "lease-1", "worker:1"));
  EXPECT_EQ(pushes_.num_pushes(), 0u);
}

TEST(TaskSubmitterShutdownTest, CancelsCallsInFlightAndReturnsLeases) {
  FakeClock clock;
  FakeLeaseClient fake_leases;
  FakeTaskPushClient fake_pushes;
  CancelAnsweringLeases leases(&fake_leases);
  CancelAnsweringPushes pushes(&fake_pushes);
  int replies = 0, failures = 0;
  TaskSubmitterOptions options;
  options.local_raylet_address = kLocalRaylet;
  TaskSubmitter submitter(
      options, &leases, &pushes, &clock,
      {[&](const rpc::TaskSpec&, rpc::PushTaskReply) { ++replies; },
       [&](const rpc::TaskSpec&, StoredObject::Error, const std::string&) { ++failures; },
       [](const std::string&) {}});
  submitter.Submit(Task("running"));
  submitter.Submit(Task("waiting"));  // a second lease request stays in flight
  ASSERT_EQ(fake_leases.num_lease_requests(), 2u);
  fake_leases.ReplyLease(0, Granted("lease-1", "worker:1"));
  ASSERT_EQ(fake_pushes.num_pushes(), 1u);

  submitter.Shutdown();
  EXPECT_TRUE(fake_pushes.push(0).cancelled);
  EXPECT_TRUE(fake_leases.lease_request(1).cancelled);
  EXPECT_EQ(leases.returned_and_waited_, (std::vector<std::string>{"lease-1"}));
  EXPECT_EQ(replies, 0);
  submitter.Submit(Task("after"));  // ignored
  EXPECT_EQ(fake_leases.num_lease_requests(), 2u);
}

}  // namespace
}  // namespace troupe
