#include "src/gcs/task_event_manager.h"

#include "gtest/gtest.h"
#include "src/common/ids.h"

namespace troupe {
namespace {

const std::string kJob1 = JobId::FromInt(1).Binary();
const std::string kJob2 = JobId::FromInt(2).Binary();

const std::string kNode(NodeId::Size(), 'n');

// A task ID unique for every i >= 0 (its first four bytes are i).
std::string Task(int i) {
  std::string id(TaskId::Size(), static_cast<char>(i));
  for (int b = 0; b < 4; ++b) id[b] = static_cast<char>((i >> (8 * b)) & 0xff);
  return id;
}

rpc::TaskEvent Event(int task, rpc::TaskEvent::State state, int64_t time_us,
                     const std::string& job = kJob1, int attempt = 0) {
  rpc::TaskEvent event;
  event.set_task_id(Task(task));
  event.set_job_id(job);
  event.set_attempt(attempt);
  event.set_state(state);
  event.set_time_us(time_us);
  return event;
}

void Add(TaskEventManager& manager, std::vector<rpc::TaskEvent> events) {
  rpc::AddTaskEventDataRequest request;
  for (auto& event : events) *request.add_events() = std::move(event);
  manager.AddEvents(request);
}

rpc::GetTaskEventsReply Get(const TaskEventManager& manager,
                            std::vector<rpc::TaskFilter> filters = {}, int64_t limit = 0) {
  rpc::GetTaskEventsRequest request;
  for (auto& filter : filters) *request.add_filters() = filter;
  request.set_limit(limit);
  auto reply = manager.GetTaskEvents(request);
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? *reply : rpc::GetTaskEventsReply();
}

rpc::TaskFilter Filter(const std::string& key, const std::string& value, bool not_equal = false) {
  rpc::TaskFilter filter;
  filter.set_key(key);
  filter.set_value(value);
  filter.set_not_equal(not_equal);
  return filter;
}

TEST(TaskEventManagerTest, MergesOwnerAndExecutorEventsArrivingInAnyOrder) {
  TaskEventManager manager({});
  // The executor's report arrives before the owner's.
  rpc::TaskEvent running = Event(1, rpc::TaskEvent::RUNNING, 200);
  running.set_node_id(kNode);
  running.set_worker_pid(42);
  rpc::TaskEvent failed = Event(1, rpc::TaskEvent::FAILED, 300);
  failed.set_error_message("boom");
  Add(manager, {running, failed});
  rpc::TaskEvent submitted = Event(1, rpc::TaskEvent::SUBMITTED, 100);
  submitted.set_name("Plus");
  Add(manager, {submitted});

  auto reply = Get(manager);
  ASSERT_EQ(reply.tasks_size(), 1);
  const rpc::TaskRecord& task = reply.tasks(0);
  EXPECT_EQ(task.name(), "Plus");
  EXPECT_EQ(task.state(), rpc::TaskEvent::FAILED);  // not moved back by the late SUBMITTED
  EXPECT_EQ(task.node_id(), kNode);
  EXPECT_EQ(task.worker_pid(), 42);
  EXPECT_EQ(task.error_message(), "boom");
  EXPECT_EQ(task.state_time_us().at(rpc::TaskEvent::SUBMITTED), 100);
  EXPECT_EQ(task.state_time_us().at(rpc::TaskEvent::RUNNING), 200);
  EXPECT_EQ(task.state_time_us().at(rpc::TaskEvent::FAILED), 300);
}

TEST(TaskEventManagerTest, AnEndEventWithAStartTimeAlsoEntersRunning) {
  TaskEventManager manager({});
  rpc::TaskEvent finished = Event(1, rpc::TaskEvent::FINISHED, 500);
  finished.set_start_time_us(400);
  Add(manager, {finished});
  auto reply = Get(manager);
  ASSERT_EQ(reply.tasks_size(), 1);
  EXPECT_EQ(reply.tasks(0).state(), rpc::TaskEvent::FINISHED);
  EXPECT_EQ(reply.tasks(0).state_time_us().at(rpc::TaskEvent::RUNNING), 400);
  EXPECT_EQ(reply.tasks(0).state_time_us().at(rpc::TaskEvent::FINISHED), 500);
}

// Regression: a short program's tasks stayed PENDING_NODE_ASSIGNMENT for good (their workers were
// killed at job end before reporting); an attempt its job left unfinished now says so.
TEST(TaskEventManagerTest, AJobsUnfinishedAttemptsAreAbandonedAtItsEnd) {
  TaskEventManager manager({});
  rpc::TaskEvent pending = Event(1, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT, 100);
  pending.set_name("Square");
  Add(manager,
      {pending, Event(2, rpc::TaskEvent::RUNNING, 110), Event(3, rpc::TaskEvent::FINISHED, 120),
       Event(4, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT, 130, kJob2)});
  manager.OnJobFinished(JobId::FromInt(1), 1000);
  auto reply = Get(manager, {Filter("job_id", JobId::FromInt(1).Hex())});
  ASSERT_EQ(reply.tasks_size(), 3);
  for (int i : {0, 1}) {
    EXPECT_EQ(reply.tasks(i).state(), rpc::TaskEvent::FAILED) << i;
    EXPECT_EQ(reply.tasks(i).error_message(), TaskEventManager::kAbandonedAtJobEnd);
    EXPECT_EQ(reply.tasks(i).state_time_us().at(rpc::TaskEvent::FAILED), 1000);
  }
  EXPECT_EQ(reply.tasks(0).name(), "Square");
  EXPECT_EQ(reply.tasks(2).state(), rpc::TaskEvent::FINISHED);
  EXPECT_TRUE(reply.tasks(2).error_message().empty());
  // Another job's tasks are left alone.
  auto other = Get(manager, {Filter("job_id", JobId::FromInt(2).Hex())});
  ASSERT_EQ(other.tasks_size(), 1);
  EXPECT_EQ(other.tasks(0).state(), rpc::TaskEvent::PENDING_NODE_ASSIGNMENT);
  // A task first reported after its job ended, without an end: abandoned as well.
  Add(manager, {Event(5, rpc::TaskEvent::SUBMITTED, 1100)});
  auto late = Get(manager, {Filter("task_id", BytesToHex(Task(5)))});
  ASSERT_EQ(late.tasks_size(), 1);
  EXPECT_EQ(late.tasks(0).state(), rpc::TaskEvent::FAILED);
  EXPECT_EQ(late.tasks(0).error_message(), TaskEventManager::kAbandonedAtJobEnd);
}

// The workers of a finished job report what they buffered as they are stopped: a real end
// replaces the abandonment; a later pending or running report does not undo it.
TEST(TaskEventManagerTest, ARealEndReportedAfterTheJobEndedReplacesTheAbandonment) {
  TaskEventManager manager({});
  Add(manager, {Event(1, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT, 100),
                Event(2, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT, 100),
                Event(3, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT, 100)});
  manager.OnJobFinished(JobId::FromInt(1), 1000);
  rpc::TaskEvent finished = Event(1, rpc::TaskEvent::FINISHED, 900);
  finished.set_start_time_us(850);
  rpc::TaskEvent failed = Event(2, rpc::TaskEvent::FAILED, 950);
  failed.set_error_message("boom");
  Add(manager, {finished, failed, Event(3, rpc::TaskEvent::RUNNING, 990)});
  auto reply = Get(manager);
  ASSERT_EQ(reply.tasks_size(), 3);
  EXPECT_EQ(reply.tasks(0).state(), rpc::TaskEvent::FINISHED);
  EXPECT_TRUE(reply.tasks(0).error_message().empty());
  EXPECT_EQ(reply.tasks(0).state_time_us().count(rpc::TaskEvent::FAILED), 0u);
  EXPECT_EQ(reply.tasks(0).state_time_us().at(rpc::TaskEvent::FINISHED), 900);
  EXPECT_EQ(reply.tasks(0).state_time_us().at(rpc::TaskEvent::RUNNING), 850);
  EXPECT_EQ(reply.tasks(1).state(), rpc::TaskEvent::FAILED);
  EXPECT_EQ(reply.tasks(1).error_message(), "boom");
  EXPECT_EQ(reply.tasks(2).state(), rpc::TaskEvent::FAILED);
  EXPECT_EQ(reply.tasks(2).error_message(), TaskEventManager::kAbandonedAtJobEnd);
  EXPECT_EQ(reply.tasks(2).state_time_us().at(rpc::TaskEvent::RUNNING), 990);
}

TEST(TaskEventManagerTest, AttemptsAreSeparateRecords) {
  TaskEventManager manager({});
  Add(manager, {Event(1, rpc::TaskEvent::FAILED, 1, kJob1, 0),
                Event(1, rpc::TaskEvent::FINISHED, 2, kJob1, 1)});
  auto reply = Get(manager);
  ASSERT_EQ(reply.tasks_size(), 2);
  EXPECT_EQ(reply.tasks(0).attempt(), 0);
  EXPECT_EQ(reply.tasks(0).state(), rpc::TaskEvent::FAILED);
  EXPECT_EQ(reply.tasks(1).attempt(), 1);
  EXPECT_EQ(reply.tasks(1).state(), rpc::TaskEvent::FINISHED);
}

TEST(TaskEventManagerTest, PerJobCapForgetsTheOldestAndCountsThem) {
  TaskEventManager manager({/*max_tasks_per_job=*/3});
  for (int i = 1; i <= 5; ++i) Add(manager, {Event(i, rpc::TaskEvent::SUBMITTED, i)});
  Add(manager, {Event(9, rpc::TaskEvent::SUBMITTED, 9, kJob2)});  // another job: own budget
  EXPECT_EQ(manager.num_records(), 4u);

  auto job1 = Get(manager, {Filter("job_id", BytesToHex(kJob1))});
  ASSERT_EQ(job1.tasks_size(), 3);
  EXPECT_EQ(job1.tasks(0).task_id(), Task(3));  // 1 and 2 were forgotten
  EXPECT_EQ(job1.tasks(2).task_id(), Task(5));
  EXPECT_EQ(job1.num_dropped(), 2);
  auto job2 = Get(manager, {Filter("job_id", BytesToHex(kJob2))});
  EXPECT_EQ(job2.tasks_size(), 1);
  EXPECT_EQ(job2.num_dropped(), 0);
  // A forgotten attempt's late event starts a new record (and forgets the next oldest).
  Add(manager, {Event(1, rpc::TaskEvent::FINISHED, 10)});
  EXPECT_EQ(Get(manager, {Filter("job_id", BytesToHex(kJob1))}).num_dropped(), 3);
}

// Finished jobs' records are not kept forever: all jobs together keep at most max_tasks.
TEST(TaskEventManagerTest, TotalCapForgetsTheOldestOfAllJobs) {
  TaskEventManager manager({/*max_tasks_per_job=*/3, /*max_tasks=*/4});
  for (int i = 1; i <= 3; ++i) Add(manager, {Event(i, rpc::TaskEvent::SUBMITTED, i)});
  Add(manager, {Event(1, rpc::TaskEvent::FINISHED, 4)});  // an update: no new record
  for (int i = 11; i <= 13; ++i) Add(manager, {Event(i, rpc::TaskEvent::SUBMITTED, i, kJob2)});
  EXPECT_EQ(manager.num_records(), 4u);
  auto job1 = Get(manager, {Filter("job_id", BytesToHex(kJob1))});
  ASSERT_EQ(job1.tasks_size(), 1);
  EXPECT_EQ(job1.tasks(0).task_id(), Task(3));  // 1 and 2, the oldest of all, were forgotten
  EXPECT_EQ(job1.num_dropped(), 2);
  EXPECT_EQ(Get(manager, {Filter("job_id", BytesToHex(kJob2))}).tasks_size(), 3);
  // A forgotten attempt comes back with a late event: a new record, and the next oldest goes
  // (task 3), not the new one.
  Add(manager, {Event(1, rpc::TaskEvent::FINISHED, 20)});
  job1 = Get(manager, {Filter("job_id", BytesToHex(kJob1))});
  ASSERT_EQ(job1.tasks_size(), 1);
  EXPECT_EQ(job1.tasks(0).task_id(), Task(1));
  EXPECT_EQ(job1.num_dropped(), 3);
  // Many more: the count stays at the cap, and the job's cap and the total agree.
  for (int i = 100; i < 5000; ++i) {
    Add(manager, {Event(i, rpc::TaskEvent::SUBMITTED, i, i % 2 ? kJob1 : kJob2)});
  }
  EXPECT_EQ(manager.num_records(), 4u);
  job1 = Get(manager, {Filter("job_id", BytesToHex(kJob1))});
  ASSERT_EQ(job1.tasks_size(), 2);
  EXPECT_EQ(job1.tasks(1).task_id(), Task(4999));
}

TEST(TaskEventManagerTest, ProcessDropsAreReportedPerJob) {
  TaskEventManager manager({});
  rpc::AddTaskEventDataRequest request;
  rpc::TaskEventDrops* drops = request.add_dropped();
  drops->set_job_id(kJob2);
  drops->set_count(7);
  manager.AddEvents(request);
  EXPECT_EQ(Get(manager, {Filter("job_id", BytesToHex(kJob2))}).num_dropped(), 7);
  EXPECT_EQ(Get(manager, {Filter("job_id", BytesToHex(kJob1))}).num_dropped(), 0);
  EXPECT_EQ(Get(manager).num_dropped(), 7);
}

TEST(TaskEventManagerTest, FiltersAndLimit) {
  TaskEventManager manager({});
  rpc::TaskEvent a = Event(1, rpc::TaskEvent::FINISHED, 1);
  a.set_name("A");
  rpc::TaskEvent b = Event(2, rpc::TaskEvent::RUNNING, 2);
  b.set_name("B");
  b.set_type(rpc::TaskSpec::ACTOR_TASK);
  rpc::TaskEvent c = Event(3, rpc::TaskEvent::FINISHED, 3, kJob2);
  c.set_name("A");
  Add(manager, {a, b, c});

  EXPECT_EQ(Get(manager, {Filter("name", "A")}).total(), 2);
  EXPECT_EQ(Get(manager, {Filter("name", "A", /*not_equal=*/true)}).total(), 1);
  EXPECT_EQ(Get(manager, {Filter("state", "RUNNING")}).tasks(0).task_id(), Task(2));
  EXPECT_EQ(Get(manager, {Filter("type", "ACTOR_TASK")}).total(), 1);
  EXPECT_EQ(Get(manager, {Filter("name", "A"), Filter("job_id", BytesToHex(kJob2))}).total(), 1);
  EXPECT_EQ(Get(manager, {Filter("task_id", BytesToHex(Task(3)))}).tasks(0).name(), "A");
  EXPECT_EQ(Get(manager, {Filter("job_id", "not-hex")}).total(), 0);

  auto limited = Get(manager, {}, /*limit=*/2);
  EXPECT_EQ(limited.total(), 3);
  ASSERT_EQ(limited.tasks_size(), 2);
  EXPECT_EQ(limited.tasks(0).task_id(), Task(1));  // oldest first, across jobs
  EXPECT_EQ(limited.tasks(1).task_id(), Task(2));

  rpc::GetTaskEventsRequest bad;
  *bad.add_filters() = Filter("colour", "red");
  EXPECT_EQ(manager.GetTaskEvents(bad).status().code(), absl::StatusCode::kInvalidArgument);
}


TEST(TaskEventManagerTest, AnOwnersOneEventEntersSubmittedAndItsPendingState) {
  TaskEventManager manager({});
  // The executor's end arrives first, then the owner's single submission event.
  rpc::TaskEvent finished = Event(1, rpc::TaskEvent::FINISHED, 300);
  finished.set_start_time_us(200);
  Add(manager, {finished});
  rpc::TaskEvent submitted = Event(1, rpc::TaskEvent::PENDING_NODE_ASSIGNMENT, 150);
  submitted.set_submitted_time_us(100);
  submitted.set_name("Plus");
  Add(manager, {submitted});
  auto reply = Get(manager);
  ASSERT_EQ(reply.tasks_size(), 1);
  const rpc::TaskRecord& task = reply.tasks(0);
  EXPECT_EQ(task.state(), rpc::TaskEvent::FINISHED);
  EXPECT_EQ(task.name(), "Plus");
  EXPECT_EQ(task.state_time_us_size(), 4);
  EXPECT_EQ(task.state_time_us().at(rpc::TaskEvent::SUBMITTED), 100);
  EXPECT_EQ(task.state_time_us().at(rpc::TaskEvent::PENDING_NODE_ASSIGNMENT), 150);
  EXPECT_EQ(task.state_time_us().at(rpc::TaskEvent::RUNNING), 200);
  EXPECT_EQ(task.state_time_us().at(rpc::TaskEvent::FINISHED), 300);
  EXPECT_TRUE(task.actor_id().empty());  // never reported: not a nil ID's bytes
  EXPECT_TRUE(task.node_id().empty());
  EXPECT_EQ(task.job_id(), kJob1);
}

TEST(TaskEventManagerTest, TheCapForgetsByCreationOrderNotByLastUpdate) {
  TaskEventManager manager({/*max_tasks_per_job=*/2});
  Add(manager, {Event(1, rpc::TaskEvent::RUNNING, 1), Event(2, rpc::TaskEvent::RUNNING, 2)});
  rpc::TaskEvent late = Event(1, rpc::TaskEvent::FINISHED, 3);  // updates 1: still the oldest
  late.set_worker_pid(7);
  Add(manager, {late});
  EXPECT_EQ(manager.num_records(), 2u);
  Add(manager, {Event(3, rpc::TaskEvent::SUBMITTED, 4)});
  auto reply = Get(manager);
  ASSERT_EQ(reply.tasks_size(), 2);
  EXPECT_EQ(reply.tasks(0).task_id(), Task(2));
  EXPECT_EQ(reply.tasks(0).state(), rpc::TaskEvent::RUNNING);
  EXPECT_EQ(reply.tasks(1).task_id(), Task(3));
  EXPECT_EQ(reply.num_dropped(), 1);
  // Two attempts of one task are two records, in the job's budget.
  Add(manager, {Event(3, rpc::TaskEvent::SUBMITTED, 5, kJob1, /*attempt=*/1)});
  reply = Get(manager);
  ASSERT_EQ(reply.tasks_size(), 2);
  EXPECT_EQ(reply.tasks(0).attempt(), 0);
  EXPECT_EQ(reply.tasks(1).attempt(), 1);
  EXPECT_EQ(reply.num_dropped(), 2);
}

TEST(TaskEventManagerTest, AnEventWithoutAValidTaskIdIsDroppedAndCounted) {
  TaskEventManager manager({});
  rpc::TaskEvent bad = Event(1, rpc::TaskEvent::RUNNING, 1);
  bad.set_task_id("short");
  rpc::TaskEvent odd_node = Event(2, rpc::TaskEvent::RUNNING, 2);
  odd_node.set_node_id("not-a-node-id");  // ignored, the rest merged
  odd_node.set_worker_pid(9);
  Add(manager, {bad, odd_node});
  EXPECT_EQ(manager.num_records(), 1u);
  auto reply = Get(manager);
  EXPECT_EQ(reply.num_dropped(), 1);
  ASSERT_EQ(reply.tasks_size(), 1);
  EXPECT_TRUE(reply.tasks(0).node_id().empty());
  EXPECT_EQ(reply.tasks(0).worker_pid(), 9);
}

TEST(TaskEventManagerTest, FiltersMatchNamesAndIdsAsQueriesShowThem) {
  TaskEventManager manager({});
  rpc::TaskEvent a = Event(1, rpc::TaskEvent::RUNNING, 1);
  a.set_name("a-long-function-name::With::Scopes");
  a.set_node_id(kNode);
  Add(manager, {a, Event(2, rpc::TaskEvent::RUNNING, 2)});
  EXPECT_EQ(Get(manager, {Filter("name", "a-long-function-name::With::Scopes")}).total(), 1);
  EXPECT_EQ(Get(manager, {Filter("node_id", BytesToHex(kNode))}).total(), 1);
  EXPECT_EQ(Get(manager, {Filter("node_id", "")}).total(), 1);  // the one with no node
}

}  // namespace
}  // namespace troupe
