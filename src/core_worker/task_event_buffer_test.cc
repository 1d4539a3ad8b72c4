#include "src/core_worker/task_event_buffer.h"

#include <vector>

#include "gtest/gtest.h"

namespace troupe {
namespace {

TaskStateEvent Event(int i, const std::string& job = "job1") {
  TaskStateEvent event;
  event.task_id = std::string(16, static_cast<char>(i));
  event.job_id = job;
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
  EXPECT_EQ(reports.requests[0].events(3).task_id(), std::string(16, '\3'));
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
  for (int i = 0; i < 5; ++i) buffer.Record(Event(i, "jobA"));
  buffer.Record(Event(9, "jobB"));
  EXPECT_EQ(buffer.num_buffered(), 3u);
  EXPECT_EQ(buffer.num_dropped(), 3);
  buffer.Flush();
  ASSERT_EQ(reports.requests.size(), 1u);
  const auto& request = reports.requests[0];
  EXPECT_EQ(request.events_size(), 3);
  EXPECT_EQ(request.events(2).time_us(), 1002);  // the oldest were kept
  std::map<std::string, int64_t> dropped;
  for (const auto& d : request.dropped()) dropped[d.job_id()] = d.count();
  EXPECT_EQ(dropped, (std::map<std::string, int64_t>{{"jobA", 2}, {"jobB", 1}}));
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

TEST(TaskEventBufferTest, StopFlushesWhatIsLeft) {
  Reports reports;
  TaskEventBuffer::Options options;
  options.flush_interval = absl::Hours(1);  // only Stop flushes
  TaskEventBuffer buffer(options, reports.Fn());
  buffer.Start();
  buffer.Record(Event(1));
  buffer.Stop();
  ASSERT_EQ(reports.requests.size(), 1u);
  EXPECT_EQ(reports.requests[0].events_size(), 1);
  buffer.Stop();  // idempotent
  EXPECT_EQ(reports.requests.size(), 1u);
}

}  // namespace
}  // namespace troupe

namespace troupe {
namespace {

TaskEventBuffer::Options Identity() {
  TaskEventBuffer::Options options;
  options.node_id = "node-n";
  options.worker_id = "worker-w";
  options.pid = 77;
  return options;
}

TEST(TaskEventBufferTest, ARunThatEndsBetweenFlushesIsOneEventCarryingItsStart) {
  Reports reports;
  TaskEventBuffer buffer(Identity(), reports.Fn());
  const uint64_t token = buffer.BeginRunning(Event(1));  // time 1001
  buffer.EndRunning(token, rpc::TaskEvent::FINISHED, absl::FromUnixMicros(5000), "");
  buffer.Flush();
  ASSERT_EQ(reports.requests.size(), 1u);
  ASSERT_EQ(reports.requests[0].events_size(), 1);
  const rpc::TaskEvent& event = reports.requests[0].events(0);
  EXPECT_EQ(event.state(), rpc::TaskEvent::FINISHED);
  EXPECT_EQ(event.time_us(), 5000);
  EXPECT_EQ(event.start_time_us(), 1001);
  EXPECT_EQ(event.node_id(), "node-n");  // this process's, filled in at the flush
  EXPECT_EQ(event.worker_id(), "worker-w");
  EXPECT_EQ(event.worker_pid(), 77);
}

TEST(TaskEventBufferTest, ARunStillGoingAtAFlushIsReportedRunningOnce) {
  Reports reports;
  TaskEventBuffer buffer(Identity(), reports.Fn());
  const uint64_t token = buffer.BeginRunning(Event(2));
  buffer.Flush();
  buffer.Flush();  // not again
  buffer.EndRunning(token, rpc::TaskEvent::FAILED, absl::FromUnixMicros(9000), "E: boom");
  buffer.Flush();
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

}  // namespace
}  // namespace troupe
