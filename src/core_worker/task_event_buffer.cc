#include "src/core_worker/task_event_buffer.h"

#include <algorithm>
#include <utility>

namespace troupe {

TaskEventBuffer::TaskEventBuffer(Options options, Report report)
    : options_(options), report_(std::move(report)) {}

TaskEventBuffer::~TaskEventBuffer() {
  // No last flush here: what `report_` uses may be gone already; Stop() is the owner's to call.
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (flusher_.joinable()) flusher_.join();
}

void TaskEventBuffer::Record(TaskStateEvent event) {
  absl::MutexLock lock(&mu_);
  AppendLocked(std::move(event));
}

void TaskEventBuffer::AppendLocked(TaskStateEvent event) {
  if (events_.size() >= options_.max_buffered_events) {
    ++unreported_drops_[event.job_id];
    num_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  events_.push_back(std::move(event));
}

uint64_t TaskEventBuffer::BeginRunning(TaskStateEvent running) {
  running.state = rpc::TaskEvent::RUNNING;
  running.executed_here = true;
  absl::MutexLock lock(&mu_);
  const uint64_t token = next_token_++;
  running_[token].event = std::move(running);
  return token;
}

void TaskEventBuffer::EndRunning(uint64_t token, rpc::TaskEvent::State state, absl::Time end,
                                 std::string error_message) {
  absl::MutexLock lock(&mu_);
  auto it = running_.find(token);
  if (it == running_.end()) return;
  TaskStateEvent event = std::move(it->second.event);
  const bool reported = it->second.reported;
  running_.erase(it);
  if (!reported) event.start_time = event.time;
  event.state = state;
  event.time = end;
  event.error_message = std::move(error_message);
  AppendLocked(std::move(event));
}

size_t TaskEventBuffer::num_buffered() const {
  absl::MutexLock lock(&mu_);
  return events_.size();
}

void TaskEventBuffer::Start() {
  if (flusher_.joinable()) return;
  flusher_ = std::thread([this] {
    while (!stop_.WaitForNotificationWithTimeout(options_.flush_interval)) Flush();
  });
}

void TaskEventBuffer::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (flusher_.joinable()) flusher_.join();
  Flush();
}

void TaskEventBuffer::ToProto(const TaskStateEvent& event, rpc::TaskEvent* out) const {
  out->set_task_id(event.task_id);
  out->set_attempt(event.attempt);
  out->set_job_id(event.job_id);
  out->set_state(event.state);
  out->set_time_us(absl::ToUnixMicros(event.time));
  out->set_name(event.name);
  out->set_type(event.type);
  out->set_actor_id(event.actor_id);
  out->set_node_id(event.executed_here ? options_.node_id : event.node_id);
  out->set_worker_id(event.executed_here ? options_.worker_id : event.worker_id);
  out->set_worker_pid(event.executed_here ? options_.pid : event.worker_pid);
  out->set_error_message(event.error_message);
  if (event.start_time != absl::InfinitePast()) {
    out->set_start_time_us(absl::ToUnixMicros(event.start_time));
  }
}

int TaskEventBuffer::Flush() {
  absl::MutexLock flush_lock(&flush_mu_);
  std::vector<TaskStateEvent> events;
  absl::flat_hash_map<std::string, int64_t> drops;
  {
    absl::MutexLock lock(&mu_);
    // Runs still going that were not reported yet: RUNNING now, so they show while they last.
    for (auto& [token, run] : running_) {
      if (run.reported) continue;
      run.reported = true;
      AppendLocked(run.event);
    }
    events.swap(events_);
    // About as many next time: one allocation instead of the vector regrowing on the task path.
    events_.reserve(std::min(events.size(), options_.max_buffered_events));
    drops.swap(unreported_drops_);
  }
  if (events.empty() && drops.empty()) return 0;
  int calls = 0;
  size_t next = 0;
  do {
    rpc::AddTaskEventDataRequest request;
    const size_t end = std::min(events.size(), next + options_.max_batch_events);
    for (; next < end; ++next) ToProto(events[next], request.add_events());
    if (calls == 0) {
      for (const auto& [job_id, count] : drops) {
        rpc::TaskEventDrops* out = request.add_dropped();
        out->set_job_id(job_id);
        out->set_count(count);
      }
    }
    ++calls;
    if (report_(request).ok()) continue;
    // Lost: say so in the next report instead.
    absl::MutexLock lock(&mu_);
    for (const auto& event : request.events()) ++unreported_drops_[event.job_id()];
    for (const auto& dropped : request.dropped()) {
      unreported_drops_[dropped.job_id()] += dropped.count();
    }
    num_dropped_.fetch_add(request.events_size(), std::memory_order_relaxed);
  } while (next < events.size());
  return calls;
}

}  // namespace troupe
