#include "src/core_worker/task_event_buffer.h"

#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace troupe {
namespace {

std::string TaskBytes(int i) { return std::string(TaskId::Size(), static_cast<char>(i)); }

TaskStateEvent Event(int i, uint32_t job = 1) {
  TaskStateEvent event;
  event.task_id = *TaskId::FromBinary(TaskBytes(i));
  event.job_id = JobId::FromInt(job);
  event.state = rpc::TaskEvent::RUNNING;
  event.time = absl::FromUnixMicros(1000 + i);
  event.name = "f";
  return event;
}

struct Reports {
  std::vector<rpc::AddTaskEventDataRequest> requests;
  bool fail = false;
  TaskEventBuffer::Report Fn() {
    return [this](const rpc::AddTaskEventDataRequest& request) {
      requests.push_back(request);
      return fail ? absl::UnavailableError("down") : absl::OkStatus();
    };
  }
};

TEST(TaskEventBufferTest, FlushSendsEverythingInOneCallAndEmptiesTheBuffer) {
  Reports reports;
  TaskEventBuffer buffer({}, reports.Fn());
  for (int i = 0; i < 5; ++i) buffer.Record(Event(i));
  EXPECT_EQ(buffer.Flush(), 1);
  ASSERT_EQ(reports.requests.size(), 1u);
  ASSERT_EQ(reports.requests[0].events_size(), 5);
  EXPECT_EQ(reports.requests[0].events(3).task_id(), TaskBytes(3));
  EXPECT_EQ(reports.requests[0].events(3).time_us(), 1003);
  EXPECT_EQ(reports.requests[0].events(3).state(), rpc::TaskEvent::RUNNING);
  EXPECT_EQ(buffer.num_buffered(), 0u);
  EXPECT_EQ(buffer.Flush(), 0);  // nothing new: no call
  EXPECT_EQ(reports.requests.size(), 1u);
}

TEST(TaskEventBufferTest, BatchesLargeFlushes) {
  Reports reports;
  TaskEventBuffer::Options options;
  options.max_batch_events = 4;
  TaskEventBuffer buffer(options, reports.Fn());
  for (int i = 0; i < 10; ++i) buffer.Record(Event(i));
  EXPECT_EQ(buffer.Flush(), 3);
  ASSERT_EQ(reports.requests.size(), 3u);
  EXPECT_EQ(reports.requests[0].events_size(), 4);
  EXPECT_EQ(reports.requests[2].events_size(), 2);
  EXPECT_EQ(reports.requests[2].events(1).time_us(), 1009);  // in order
}

TEST(TaskEventBufferTest, FullBufferDropsNewEventsAndReportsTheCountPerJob) {
  Reports reports;
  TaskEventBuffer::Options options;
  options.max_buffered_events = 3;
  TaskEventBuffer buffer(options, reports.Fn());
  for (int i = 0; i < 5; ++i) buffer.Record(Event(i, /*job=*/10));
  buffer.Record(Event(9, /*job=*/11));
  EXPECT_EQ(buffer.num_buffered(), 3u);
  EXPECT_EQ(buffer.num_dropped(), 3);
  buffer.Flush();
  ASSERT_EQ(reports.requests.size(), 1u);
  const auto& request = reports.requests[0];
  EXPECT_EQ(request.events_size(), 3);
  EXPECT_EQ(request.events(2).time_us(), 1002);  // the oldest were kept
  std::map<std::string, int64_t> dropped;
  for (const auto& d : request.dropped()) dropped[d.job_id()] = d.count();
  EXPECT_EQ(dropped, (std::map<std::string, int64_t>{{JobId::FromInt(10).Binary(), 2},
                                                     {JobId::FromInt(11).Binary(), 1}}));
  // Room again after the flush.
  buffer.Record(Event(7));
  EXPECT_EQ(buffer.num_buffered(), 1u);
}

TEST(TaskEventBufferTest, AFailedReportCountsItsEventsAsDroppedNextTime) {
  Reports reports;
  reports.fail = true;
  TaskEventBuffer buffer({}, reports.Fn());
  buffer.Record(Event(1));
  buffer.Record(Event(2));
  buffer.Flush();
  EXPECT_EQ(buffer.num_dropped(), 2);
  reports.fail = false;
  buffer.Flush();
  ASSERT_EQ(reports.requests.size(), 2u);
  EXPECT_EQ(reports.requests[1].events_size(), 0);
  ASSERT_EQ(reports.requests[1].dropped_size(), 1);
  EXPECT_EQ(reports.requests[1].dropped(0).count(), 2);
}

TEST(TaskEventBufferTest, AFlushWithNothingToSayMakesNoCall) {
  Reports reports;
  TaskEventBuffer buffer(TaskEventBuffer::Options{}, reports.Fn());
  EXPECT_EQ(buffer.Flush(), 0);  // the owner's periodic flush of an idle process: no RPC
  buffer.Record(Event(1));
  EXPECT_EQ(buffer.Flush(), 1);
  ASSERT_EQ(reports.requests.size(), 1u);
  EXPECT_EQ(reports.requests[0].events_size(), 1);
  EXPECT_EQ(buffer.Flush(), 0);
  EXPECT_EQ(reports.requests.size(), 1u);
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

TaskEventBuffer::Options Identity() {
  TaskEventBuffer::Options options;
  options.node_id = *NodeId::FromBinary(std::string(NodeId::Size(), 'n'));
  options.worker_id = *WorkerId::FromBinary(std::string(WorkerId::Size(), 'w'));
  options.pid = 77;
  return options;
}

TEST(TaskEventBufferTest, ARunThatEndsBetweenFlushesIsOneEventCarryingItsStart) {
  Reports reports;
  TaskEventBuffer buffer(Identity(), reports.Fn());
  const uint64_t token = buffer.BeginRunning(Event(1));  // time 1001
  buffer.EndRunning(token, rpc::TaskEvent::FINISHED, absl::FromUnixMicros(5000), "");
  EXPECT_TRUE(reports.requests.empty()) << "a short run's end waits for the next flush";
  buffer.Flush();
  ASSERT_EQ(reports.requests.size(), 1u);
  ASSERT_EQ(reports.requests[0].events_size(), 1);
  const rpc::TaskEvent& event = reports.requests[0].events(0);
  EXPECT_EQ(event.state(), rpc::TaskEvent::FINISHED);
  EXPECT_EQ(event.time_us(), 5000);
  EXPECT_EQ(event.start_time_us(), 1001);
  EXPECT_EQ(event.node_id(), std::string(16, 'n'));  // this process's, filled in at the flush
  EXPECT_EQ(event.worker_id(), std::string(16, 'w'));
  EXPECT_EQ(event.name(), "f");
  EXPECT_EQ(event.worker_pid(), 77);
}

TEST(TaskEventBufferTest, ARunStillGoingAtAFlushIsReportedRunningOnce) {
  Reports reports;
  TaskEventBuffer buffer(Identity(), reports.Fn());
  const uint64_t token = buffer.BeginRunning(Event(2));
  buffer.Flush();
  buffer.Flush();  // not again
  buffer.EndRunning(token, rpc::TaskEvent::FAILED, absl::FromUnixMicros(9000), "E: boom");
  // Its end went out with EndRunning, not at the next flush: a process killed right after
  // answering must not leave the task RUNNING in the GCS.
  ASSERT_EQ(reports.requests.size(), 2u);
  buffer.Flush();  // nothing left
  ASSERT_EQ(reports.requests.size(), 2u);
  ASSERT_EQ(reports.requests[0].events_size(), 1);
  EXPECT_EQ(reports.requests[0].events(0).state(), rpc::TaskEvent::RUNNING);
  EXPECT_EQ(reports.requests[0].events(0).time_us(), 1002);
  EXPECT_EQ(reports.requests[0].events(0).worker_pid(), 77);
  ASSERT_EQ(reports.requests[1].events_size(), 1);
  const rpc::TaskEvent& end = reports.requests[1].events(0);
  EXPECT_EQ(end.state(), rpc::TaskEvent::FAILED);
  EXPECT_EQ(end.error_message(), "E: boom");
  EXPECT_EQ(end.start_time_us(), 0);  // RUNNING was reported already
}


TEST(TaskEventBufferTest, AnOwnersFirstEventCarriesItsSubmissionAndDescription) {
  Reports reports;
  TaskEventBuffer buffer({}, reports.Fn());
  TaskStateEvent event = Event(4);
  event.state = rpc::TaskEvent::PENDING_NODE_ASSIGNMENT;
  event.submitted_time = absl::FromUnixMicros(900);
  std::string name = "troupe_bench::Echo::Small";  // longer than a short string
  event.name = name;
  event.type = rpc::TaskSpec::ACTOR_TASK;
  event.actor_id = *ActorId::FromBinary(std::string(ActorId::Size(), 'a'));
  buffer.Record(std::move(event));
  name.assign("overwritten");  // the buffer keeps its own copy of the name
  buffer.Record(Event(5));     // no submission time, no actor
  buffer.Flush();
  ASSERT_EQ(reports.requests.size(), 1u);
  ASSERT_EQ(reports.requests[0].events_size(), 2);
  const rpc::TaskEvent& first = reports.requests[0].events(0);
  EXPECT_EQ(first.state(), rpc::TaskEvent::PENDING_NODE_ASSIGNMENT);
  EXPECT_EQ(first.time_us(), 1004);
  EXPECT_EQ(first.submitted_time_us(), 900);
  EXPECT_EQ(first.name(), "troupe_bench::Echo::Small");
  EXPECT_EQ(first.type(), rpc::TaskSpec::ACTOR_TASK);
  EXPECT_EQ(first.actor_id(), std::string(16, 'a'));
  EXPECT_EQ(first.job_id(), JobId::FromInt(1).Binary());
  EXPECT_TRUE(first.node_id().empty());  // recorded by an owner: no node
  const rpc::TaskEvent& second = reports.requests[0].events(1);
  EXPECT_EQ(second.submitted_time_us(), 0);
  EXPECT_TRUE(second.actor_id().empty());
}

TEST(TaskEventBufferTest, NamesBeyondTheNameTableAreStillReported) {
  Reports reports;
  TaskEventBuffer::Options options;
  options.max_names = 1;
  TaskEventBuffer buffer(options, reports.Fn());
  for (const char* name : {"first", "second-name-that-did-not-fit", "first"}) {
    TaskStateEvent event = Event(1);
    std::string copy = name;
    event.name = copy;
    buffer.Record(std::move(event));
  }
  buffer.Flush();
  ASSERT_EQ(reports.requests.size(), 1u);
  ASSERT_EQ(reports.requests[0].events_size(), 3);
  EXPECT_EQ(reports.requests[0].events(0).name(), "first");
  EXPECT_EQ(reports.requests[0].events(1).name(), "second-name-that-did-not-fit");
  EXPECT_EQ(reports.requests[0].events(2).name(), "first");
}

// Regression: actor methods showed as "&Store::Fail" (their TROUPE_REMOTE spelling).
TEST(TaskEventBufferTest, AMethodsNameIsReportedWithoutItsAddressOf) {
  Reports reports;
  TaskEventBuffer buffer({}, reports.Fn());
  TaskStateEvent event = Event(1);
  event.name = "&Store::Fail";
  buffer.Record(event);
  TaskStateEvent running = Event(2);
  running.name = "&Store::Get";
  buffer.EndRunning(buffer.BeginRunning(running), rpc::TaskEvent::FINISHED,
                    absl::FromUnixMicros(5000), "");
  ASSERT_EQ(buffer.Flush(), 1);
  ASSERT_EQ(reports.requests[0].events_size(), 2);
  EXPECT_EQ(reports.requests[0].events(0).name(), "Store::Fail");
  EXPECT_EQ(reports.requests[0].events(1).name(), "Store::Get");
}

TEST(TaskEventBufferTest, TaskStateEventOfTakesTheSpecsIds) {
  rpc::TaskSpec spec;
  spec.set_task_id(TaskBytes(7));
  spec.set_job_id(JobId::FromInt(3).Binary());
  spec.set_attempt(2);
  TaskStateEvent event = TaskStateEventOf(spec);
  EXPECT_EQ(event.task_id.Binary(), TaskBytes(7));
  EXPECT_EQ(event.job_id, JobId::FromInt(3));
  EXPECT_EQ(event.attempt, 2);
  spec.set_task_id("short");
  EXPECT_TRUE(TaskStateEventOf(spec).task_id.IsNil());
}

}  // namespace
}  // namespace troupe
